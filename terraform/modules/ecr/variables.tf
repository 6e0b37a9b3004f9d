variable "repositories" {
  description = "Repositories to create: a map of a short key (e.g. tts, agent) to the repository name."
  type        = map(string)

  validation {
    condition     = length(var.repositories) > 0
    error_message = "At least one repository is required."
  }

  validation {
    condition     = alltrue([for name in values(var.repositories) : can(regex("^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$", name))])
    error_message = "Repository names must be lowercase letters, digits and . _ - / separators (ECR naming rules)."
  }
}

variable "keep_last_images" {
  description = "How many tagged images each repository keeps; older ones expire."
  type        = number
  default     = 20

  validation {
    condition     = var.keep_last_images >= 1
    error_message = "keep_last_images must be at least 1."
  }
}

variable "untagged_image_expiry_days" {
  description = "Days after which untagged images (left behind by multi-arch or failed pushes) expire."
  type        = number
  default     = 7

  validation {
    condition     = var.untagged_image_expiry_days >= 1
    error_message = "untagged_image_expiry_days must be at least 1."
  }
}

variable "kms_key_arn" {
  description = "KMS key for image encryption at rest; null uses the AWS-managed ECR key."
  type        = string
  default     = null
}

variable "force_delete" {
  description = "Allow terraform destroy to delete repositories that still hold images."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
