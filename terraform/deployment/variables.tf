variable "region" {
  description = "AWS region (the shared root's region)."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Project name: names the endpoint, the roles and (with underscores) the agent runtime."
  type        = string
  default     = "kokoro-tts"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,26}[a-z0-9]$", var.name))
    error_message = "name must be 2-28 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "tts_image_uri" {
  description = "TTS image by digest, from the shared root's tts_repository_url: <account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<digest>."
  type        = string

  validation {
    condition     = can(regex("^\\d{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com(?:\\.cn)?/[^@:]+@sha256:[0-9a-f]{64}$", var.tts_image_uri))
    error_message = "tts_image_uri must be an ECR image referenced by digest: <account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<64 hex digits>."
  }

  # SageMaker and AgentCore pull only from the registry of their own region.
  validation {
    condition     = strcontains(var.tts_image_uri, ".dkr.ecr.${var.region}.")
    error_message = "tts_image_uri must be in the deployment's region (var.region)."
  }
}

variable "agent_image_uri" {
  description = "Agent image (linux/arm64) by digest, from the shared root's agent_repository_url."
  type        = string

  validation {
    condition     = can(regex("^\\d{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com(?:\\.cn)?/[^@:]+@sha256:[0-9a-f]{64}$", var.agent_image_uri))
    error_message = "agent_image_uri must be an ECR image referenced by digest: <account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<64 hex digits>."
  }

  # SageMaker and AgentCore pull only from the registry of their own region.
  validation {
    condition     = strcontains(var.agent_image_uri, ".dkr.ecr.${var.region}.")
    error_message = "agent_image_uri must be in the deployment's region (var.region)."
  }
}

variable "weights_bucket_name" {
  description = "Weight bucket (the shared root's weights_bucket_name)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.weights_bucket_name))
    error_message = "weights_bucket_name must be a valid S3 bucket name."
  }
}

variable "weights_prefix" {
  description = "Key prefix of the weight version to serve, with a trailing slash (the shared root's weights_prefix, e.g. kokoro-82m/v1.0/)."
  type        = string

  validation {
    condition     = can(regex("^[^/].*/$", var.weights_prefix))
    error_message = "weights_prefix must end with / and must not start with /."
  }
}

variable "weights_kms_key_arn" {
  description = "KMS key of the weight bucket (the shared root's weights_kms_key_arn); null when the bucket uses SSE-S3."
  type        = string
  default     = null
}

variable "bedrock_model_id" {
  description = "Bedrock model or inference profile id the agent uses, Active in the region (e.g. us.amazon.nova-2-lite-v1:0; Anthropic models need a Marketplace subscription and a use-case form first: docs/deploy.md)."
  type        = string

  validation {
    condition     = length(trimspace(var.bedrock_model_id)) > 0
    error_message = "bedrock_model_id must not be empty."
  }
}

variable "instance_type" {
  description = "Endpoint instance type: a GPU type (ml.g*, ml.p*) runs the torch image on CUDA, any other the onnx image on CPU."
  type        = string
  default     = "ml.g5.xlarge"

  validation {
    condition     = startswith(var.instance_type, "ml.")
    error_message = "instance_type must be a SageMaker instance type (starting with \"ml.\")."
  }

  # Graviton hosts are arm64; the TTS image is linux/amd64 (the preflight refuses them too).
  validation {
    condition     = !can(regex("^ml\\.[a-z]+[0-9]+g[a-z]*\\.", var.instance_type))
    error_message = "instance_type must not be a Graviton (arm64) type: the TTS image is built for linux/amd64."
  }
}

variable "initial_instance_count" {
  description = "Instances the endpoint starts with; make deploy passes the live desired count of an autoscaled endpoint, so a redeploy keeps it."
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

variable "inference_ami_version" {
  description = "Host image of GPU variants, which sets the NVIDIA driver the image's CUDA runs on (al2-ami-sagemaker-inference-gpu-3-1: driver 550); ignored for CPU instance types."
  type        = string
  default     = "al2-ami-sagemaker-inference-gpu-3-1"

  # What the AWS provider 5.100 accepts (the module checks the same list).
  validation {
    condition     = var.inference_ami_version == null ? true : contains(["al2-ami-sagemaker-inference-gpu-2", "al2-ami-sagemaker-inference-gpu-2-1", "al2-ami-sagemaker-inference-gpu-3-1"], var.inference_ami_version)
    error_message = "inference_ami_version must be al2-ami-sagemaker-inference-gpu-2, -gpu-2-1 or -gpu-3-1 (what the AWS provider 5.100 accepts), or null."
  }
}

variable "enable_autoscaling" {
  description = "Scale the endpoint between min_instance_count and max_instance_count on concurrent requests (open TTS sessions) per instance."
  type        = bool
  default     = true
}

variable "gpu_stream_slots" {
  description = "The stream slots `make gpu-check` measured on a GPU (bench/results/gpu.json, streams.batched.slots: make deploy passes them on a GPU instance type) and where they come from. null: an estimate (modules/sagemaker_endpoint/capacity.tf)."
  type = object({
    slots  = number
    source = string
  })
  default = null
}

variable "target_concurrent_requests_per_model" {
  description = "Override of the autoscaling target: open requests (TTS sessions) per instance before another instance is added. null: derived from instance_type (modules/sagemaker_endpoint/capacity.tf, docs/deploy.md): below the stream slots the server computes there by a headroom for the load's fluctuation."
  type        = number
  default     = null

  validation {
    condition     = var.target_concurrent_requests_per_model == null ? true : var.target_concurrent_requests_per_model > 0
    error_message = "target_concurrent_requests_per_model must be positive, or null to derive it from instance_type."
  }
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the endpoint's and the runtime's logs."
  type        = number
  default     = 30
}

variable "tts_environment" {
  description = "Extra environment variables for the TTS container (KOKORO_BACKEND is torch on GPU instance types, onnx on CPU ones, unless overridden)."
  type        = map(string)
  default     = {}
}

variable "agent_session_storage" {
  description = "Where the agent keeps its conversations' turns (docs/agent.md): memory (each AgentCore session's microVM; lost when it ends) or s3 (the weight bucket, under sessions/<runtime>/, expired by its lifecycle rule; survives a restart or a redeploy)."
  type        = string
  default     = "memory"

  validation {
    condition     = contains(["memory", "s3"], var.agent_session_storage)
    error_message = "agent_session_storage must be memory or s3."
  }
}

variable "agent_environment" {
  description = "Extra environment variables for the agent runtime."
  type        = map(string)
  default     = {}
}

variable "enable_runtime_outputs" {
  description = "Read the runtime ARN and id back from the CloudFormation stack. Only a local emulator that cannot resolve them needs false."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags for every resource (provider default_tags)."
  type        = map(string)
  default = {
    Project   = "kokoro-tts"
    ManagedBy = "terraform"
  }
}
