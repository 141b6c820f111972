"""kqp.quotas"""
