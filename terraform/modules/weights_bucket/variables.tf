variable "bucket_name" {
  description = "Bucket name; null lets AWS-unique naming derive one from bucket_name_prefix."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)."
  }
}

variable "bucket_name_prefix" {
  description = "Prefix for a generated bucket name, used when bucket_name is null."
  type        = string
  default     = "kokoro-weights-"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,36}$", var.bucket_name_prefix))
    error_message = "bucket_name_prefix must be at most 37 lowercase letters, digits, dots and hyphens (S3 adds 26 characters)."
  }
}

variable "model_name" {
  description = "First path segment of the weight layout (one folder per model)."
  type        = string
  default     = "kokoro-82m"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*$", var.model_name)) && var.model_name != "sessions"
    error_message = "model_name must be a single path segment of letters, digits, . _ - (not sessions, where the agent's turns expire)."
  }
}

variable "model_version" {
  description = "Second path segment: the weight version the endpoint reads (e.g. v1.0)."
  type        = string
  default     = "v1.0"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*$", var.model_version))
    error_message = "model_version must be a single path segment of letters, digits, . _ -."
  }
}

variable "kms_key_arn" {
  description = "Existing KMS key for SSE-KMS; null creates a dedicated key with rotation."
  type        = string
  default     = null
}

variable "kms_key_deletion_window_days" {
  description = "Waiting period before a created KMS key is deleted."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_key_deletion_window_days >= 7 && var.kms_key_deletion_window_days <= 30
    error_message = "kms_key_deletion_window_days must be between 7 and 30."
  }
}

variable "noncurrent_version_expiration_days" {
  description = "Days a superseded object version is kept before it expires."
  type        = number
  default     = 90

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1
    error_message = "noncurrent_version_expiration_days must be at least 1."
  }
}

variable "session_expiration_days" {
  description = "Days the agent's conversation turns (keys under sessions/) are kept."
  type        = number
  default     = 1

  validation {
    condition     = var.session_expiration_days >= 1
    error_message = "session_expiration_days must be at least 1."
  }
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete the bucket with every object version in it."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
