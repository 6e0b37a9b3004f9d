"""A local stand-in for SageMaker's InvokeEndpointWithBidirectionalStream (docs/sagemaker-standin.md).

It accepts the HTTP/2 request the AWS SDK sends, relays its payload parts to a container's
``/invocations-bidirectional-stream`` WebSocket, and streams the container's frames back as payload parts.
"""

from .app import StandIn, StreamRecord
from .serve import RunningStandIn, hypercorn_config, serving
from .tls import write_self_signed

__all__ = ["RunningStandIn", "StandIn", "StreamRecord", "hypercorn_config", "serving", "write_self_signed"]
