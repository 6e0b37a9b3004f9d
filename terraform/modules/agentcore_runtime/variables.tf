variable "name" {
  description = "Runtime name. AgentCore allows only letters, digits and underscores (max 48, starting with a letter): other characters become underscores."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z]", var.name))
    error_message = "name must start with a letter."
  }
}

variable "description" {
  description = "Runtime description."
  type        = string
  default     = "Strands voice agent"
}

variable "image_uri" {
  description = "Agent container image pinned by digest (<registry>/<repository>@sha256:<digest>), so a new push updates the runtime. AgentCore runs linux/arm64 images."
  type        = string

  validation {
    condition     = can(regex("^[^@\\s]+@sha256:[0-9a-f]{64}$", var.image_uri))
    error_message = "image_uri must reference the image by digest: <repository url>@sha256:<64 hex digits>."
  }
}

variable "role_arn" {
  description = "ARN of the runtime's execution role."
  type        = string
}

variable "tts_endpoint_name" {
  description = "SageMaker endpoint the agent speaks through (TTS_ENDPOINT_NAME)."
  type        = string
}

variable "bedrock_model_id" {
  description = "Bedrock model or inference profile id the agent uses (BEDROCK_MODEL_ID)."
  type        = string

  validation {
    condition     = length(trimspace(var.bedrock_model_id)) > 0
    error_message = "bedrock_model_id must not be empty."
  }
}

variable "region" {
  description = "Region passed to the agent as AWS_REGION; null uses the provider's region."
  type        = string
  default     = null
}

variable "environment" {
  description = "Extra environment variables for the agent (AGENT_MODEL=bedrock, TTS_ENDPOINT_NAME, AWS_REGION and BEDROCK_MODEL_ID win on a clash)."
  type        = map(string)
  default     = {}
}

variable "enable_runtime_outputs" {
  description = "Export the runtime ARN and id from the stack (Fn::GetAtt). Set false only where CloudFormation cannot resolve the attributes, e.g. a local emulator."
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the runtime's logs (the log group exists only with enable_runtime_outputs, which names the runtime id)."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, ... 3653)."
  }
}

variable "log_kms_key_arn" {
  description = "KMS key for the log group; null uses CloudWatch Logs' own encryption."
  type        = string
  default     = null
}

variable "notification_arns" {
  description = "SNS topics that receive the stack's events."
  type        = list(string)
  default     = []
}

variable "timeout_minutes" {
  description = "How long a stack create or update may take."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
