"""kqp.config"""
