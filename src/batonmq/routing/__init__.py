"""Exchange types: direct, fanout, topic and headers, registered by name on import."""

from batonmq.routing.base import register
from batonmq.routing.direct import DirectExchange
from batonmq.routing.fanout import FanoutExchange
from batonmq.routing.headers import HeadersExchange
from batonmq.routing.topic import TopicExchange

for _exchange_class in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange):
    register(_exchange_class.type_name, _exchange_class)

__all__ = ["DirectExchange", "FanoutExchange", "HeadersExchange", "TopicExchange"]
