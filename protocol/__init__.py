"""kqp.protocol"""
