"""The HTTP front doors: SageMaker's /ping and /invocations, the OpenAI-compatible routes, captioned speech."""
