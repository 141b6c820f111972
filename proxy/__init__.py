"""kqp.proxy"""
