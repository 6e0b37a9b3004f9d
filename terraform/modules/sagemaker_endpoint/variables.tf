variable "name" {
  description = "Endpoint name; the model and endpoint configuration names derive from it."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,35}$", var.name))
    error_message = "name must be 1-36 letters, digits and hyphens, starting and ending alphanumeric (endpoint configuration names add a 27-character suffix)."
  }
}

variable "execution_role_arn" {
  description = "ARN of the SageMaker execution role."
  type        = string
}

variable "image_uri" {
  description = "TTS container image pinned by digest (<registry>/<repository>@sha256:<digest>), so a new push is a new model."
  type        = string

  validation {
    condition     = can(regex("^[^@\\s]+@sha256:[0-9a-f]{64}$", var.image_uri))
    error_message = "image_uri must reference the image by digest: <repository url>@sha256:<64 hex digits>."
  }
}

variable "model_data_s3_uri" {
  description = "S3 prefix holding the uncompressed weights (s3://bucket/kokoro-82m/v1.0/); SageMaker copies it to /opt/ml/model."
  type        = string

  validation {
    condition     = can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+/$", var.model_data_s3_uri))
    error_message = "model_data_s3_uri must be an s3:// prefix under a bucket ending with /."
  }
}

variable "environment" {
  description = "Container environment variables (merged over KOKORO_BACKEND: torch on GPU instance types, onnx on CPU ones)."
  type        = map(string)
  default     = {}
}

variable "instance_type" {
  description = "Instance type of the production variant."
  type        = string
  default     = "ml.g5.xlarge"

  validation {
    condition     = startswith(var.instance_type, "ml.")
    error_message = "instance_type must be a SageMaker instance type (starting with \"ml.\")."
  }
}

variable "initial_instance_count" {
  description = "Instances the variant starts with; autoscaling moves it between min and max afterwards. A change of this alone makes no new configuration; a new configuration starts with it (make deploy passes the live desired count)."
  type        = number
  default     = 1

  validation {
    condition     = var.initial_instance_count >= var.min_instance_count && var.initial_instance_count <= var.max_instance_count
    error_message = "initial_instance_count must lie between min_instance_count and max_instance_count."
  }
}

variable "min_instance_count" {
  description = "Autoscaling floor."
  type        = number
  default     = 1

  validation {
    condition     = var.min_instance_count >= 1 && floor(var.min_instance_count) == var.min_instance_count
    error_message = "min_instance_count must be a whole number of at least 1."
  }
}

variable "max_instance_count" {
  description = "Autoscaling ceiling."
  type        = number
  default     = 2

  validation {
    condition     = var.max_instance_count >= var.min_instance_count && floor(var.max_instance_count) == var.max_instance_count
    error_message = "max_instance_count must be a whole number no smaller than min_instance_count."
  }
}

variable "enable_autoscaling" {
  description = "Register the variant with Application Auto Scaling (target tracking between min and max instances). Without it the endpoint keeps initial_instance_count."
  type        = bool
  default     = true
}

variable "target_concurrent_requests_per_model" {
  description = "Override of the autoscaling target (SageMakerVariantConcurrentRequestsPerModelHighResolution: open requests, i.e. TTS sessions, per instance's container before another instance is added). null: derived from instance_type (capacity.tf): below the stream slots the server computes there (measured on a CPU type, from make gpu-check or a labelled estimate on a GPU type) by a headroom for the load's fluctuation."
  type        = number
  default     = null

  validation {
    condition     = var.target_concurrent_requests_per_model == null ? true : var.target_concurrent_requests_per_model > 0
    error_message = "target_concurrent_requests_per_model must be positive, or null to derive it from instance_type."
  }

  # Every CPU type the deployment accepts has a vCPU count in capacity.tf; a module user's other type needs a value.
  validation {
    condition     = var.target_concurrent_requests_per_model != null || !var.enable_autoscaling || local.derived_target != null
    error_message = "No autoscaling target is derived for ${var.instance_type} (no vCPU count in capacity.tf): set target_concurrent_requests_per_model."
  }
}

variable "gpu_stream_slots" {
  description = "The stream slots `make gpu-check` measured (bench/results/gpu.json, streams.batched.slots) and where they come from; used on a GPU instance type. null: an estimate (capacity.tf)."
  type = object({
    slots  = number
    source = string
  })
  default = null

  validation {
    condition     = var.gpu_stream_slots == null ? true : var.gpu_stream_slots.slots >= 1 && floor(var.gpu_stream_slots.slots) == var.gpu_stream_slots.slots
    error_message = "gpu_stream_slots.slots must be a whole number of at least 1."
  }
}

variable "scale_in_cooldown" {
  description = "Seconds after a scale-in before another one."
  type        = number
  default     = 300
}

variable "scale_out_cooldown" {
  description = "Seconds after a scale-out before another one."
  type        = number
  default     = 60
}

variable "inference_ami_version" {
  description = "InferenceAmiVersion of GPU variants: the host image and its NVIDIA driver (al2-ami-sagemaker-inference-gpu-3-1: driver 550, CUDA 12.4). Ignored for CPU instance types; null keeps SageMaker's default host (driver 470 on ml.g4dn/ml.g5)."
  type        = string
  default     = "al2-ami-sagemaker-inference-gpu-3-1"

  # The GPU values the AWS provider 5.100 accepts for inference_ami_version (its enum stops at -gpu-3-1: a newer
  # one that SageMaker lists, al2023-ami-sagemaker-inference-gpu-4-1, fails the provider's own validation).
  validation {
    condition = var.inference_ami_version == null ? true : contains([
      "al2-ami-sagemaker-inference-gpu-2",
      "al2-ami-sagemaker-inference-gpu-2-1",
      "al2-ami-sagemaker-inference-gpu-3-1",
    ], var.inference_ami_version)
    error_message = "inference_ami_version must be a GPU InferenceAmiVersion the AWS provider 5.100 accepts (al2-ami-sagemaker-inference-gpu-2, -gpu-2-1, -gpu-3-1) or null."
  }
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the endpoint's logs (/aws/sagemaker/Endpoints/<name>)."
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

variable "container_startup_health_check_timeout" {
  description = "Seconds SageMaker waits for /ping to pass on a new instance (model load included)."
  type        = number
  default     = 600
}

variable "model_data_download_timeout" {
  description = "Seconds SageMaker allows to copy the weights to the instance."
  type        = number
  default     = 600
}

variable "enable_network_isolation" {
  description = "Run the container without network access (SageMaker still copies the weights in)."
  type        = bool
  default     = true
}

variable "kms_key_arn" {
  description = "KMS key for the instance storage volume; leave null for instance types with NVMe instance storage (ml.g5, ml.g6), which reject a key."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
