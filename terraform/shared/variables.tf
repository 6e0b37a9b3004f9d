variable "region" {
  description = "AWS region of the repositories and the bucket (the deployment must use the same one)."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Project name: prefixes the repository names and the generated bucket name."
  type        = string
  default     = "kokoro-tts"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,26}[a-z0-9]$", var.name))
    error_message = "name must be 2-28 lowercase letters, digits and hyphens."
  }
}

variable "weights_bucket_name" {
  description = "Weight bucket name; null generates a unique one from name."
  type        = string
  default     = null
}

variable "model_name" {
  description = "Folder of the model in the weight bucket."
  type        = string
  default     = "kokoro-82m"
}

variable "model_version" {
  description = "Folder of the weight version in the weight bucket."
  type        = string
  default     = "v1.0"
}

variable "keep_last_images" {
  description = "Tagged images kept per repository."
  type        = number
  default     = 20
}

variable "force_destroy" {
  description = "Let terraform destroy delete repositories with images and the bucket with its weights. Leave false except to tear everything down."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource (provider default_tags)."
  type        = map(string)
  default = {
    Project   = "kokoro-tts"
    ManagedBy = "terraform"
  }
}
