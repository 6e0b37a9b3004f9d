variable "name" {
  description = "Prefix for the role names (<name>-sagemaker, <name>-agentcore)."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,52}$", var.name))
    error_message = "name must be 1-52 characters of letters, digits and +=,.@_- (IAM role naming, leaving room for the suffix)."
  }
}

variable "endpoint_name" {
  description = "SageMaker endpoint name: the only endpoint the agent may invoke (its ARN is built from the name), and the execution role's log group."
  type        = string
}

variable "weights_bucket_arn" {
  description = "ARN of the weight bucket."
  type        = string
}

variable "weights_prefix" {
  description = "Key prefix of the weights the endpoint reads, with a trailing slash (e.g. kokoro-82m/v1.0/)."
  type        = string

  validation {
    condition     = endswith(var.weights_prefix, "/") && !startswith(var.weights_prefix, "/")
    error_message = "weights_prefix must end with / and must not start with /."
  }
}

variable "weights_kms_key_arn" {
  description = "KMS key of the weight bucket (SSE-KMS); null when the bucket uses SSE-S3."
  type        = string
  default     = null
}

variable "session_prefix" {
  description = "Key prefix in the weight bucket where the agent keeps its sessions' turns (AGENT_SESSION_BUCKET, docs/agent.md), with a trailing slash; null: the agent keeps them in memory and gets no S3 access."
  type        = string
  default     = null

  validation {
    # The roles' boundary allows writes under sessions/ only, and the bucket's lifecycle expires that prefix.
    condition     = var.session_prefix == null || (startswith(coalesce(var.session_prefix, "-"), "sessions/") && endswith(coalesce(var.session_prefix, "-"), "/"))
    error_message = "session_prefix must start with sessions/ and end with /."
  }
}

variable "tts_repository_arn" {
  description = "ECR repository ARN of the TTS image."
  type        = string
}

variable "agent_repository_arn" {
  description = "ECR repository ARN of the agent image."
  type        = string
}

variable "agent_runtime_name" {
  description = "AgentCore runtime name: the runtime's log groups start with it."
  type        = string
}

variable "bedrock_model_id" {
  description = "Bedrock model or inference profile id the agent invokes (e.g. us.amazon.nova-2-lite-v1:0)."
  type        = string

  validation {
    condition     = length(trimspace(var.bedrock_model_id)) > 0
    error_message = "bedrock_model_id must not be empty."
  }
}

variable "bedrock_marketplace_product_ids" {
  description = "AWS Marketplace product ids of the third-party model (Bedrock user guide, model product ids): limits the runtime role's aws-marketplace:Subscribe to them. Empty: Subscribe to any product, which the first call of a third-party model needs."
  type        = list(string)
  default     = []
}

variable "metrics_namespace" {
  description = "The only CloudWatch namespace the agent may publish metrics to."
  type        = string
  default     = "bedrock-agentcore"
}

variable "permissions_boundary_arn" {
  description = "Permissions boundary for both roles (the deployment root passes <name>-role-boundary, docs/deploy.md)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
