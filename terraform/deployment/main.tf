# Everything that costs money while it runs: destroying this root leaves the images and the weights.

data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

locals {
  endpoint_name = var.name
  # What the agentcore_runtime module makes of "<name>_agent": hyphens become underscores (AgentRuntimeName).
  agent_runtime_name = replace("${var.name}_agent", "-", "_")

  # <account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:... -> the repository ARN the roles pull from.
  ecr_image_pattern    = "^(\\d{12})\\.dkr\\.ecr\\.([a-z0-9-]+)\\.amazonaws\\.com(?:\\.cn)?/([^@:]+)@sha256:[0-9a-f]{64}$"
  tts_image_parts      = regex(local.ecr_image_pattern, var.tts_image_uri)
  agent_image_parts    = regex(local.ecr_image_pattern, var.agent_image_uri)
  tts_repository_arn   = "arn:${data.aws_partition.current.partition}:ecr:${local.tts_image_parts[1]}:${local.tts_image_parts[0]}:repository/${local.tts_image_parts[2]}"
  agent_repository_arn = "arn:${data.aws_partition.current.partition}:ecr:${local.agent_image_parts[1]}:${local.agent_image_parts[0]}:repository/${local.agent_image_parts[2]}"

  weights_bucket_arn = "arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket_name}"
  # The permissions boundary an administrator creates once (docs/deploy.md, Permissions): the deployer may create
  # and rewrite the roles only with it, so a role never does more than it allows.
  role_boundary_arn = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:policy/${var.name}-role-boundary"
  weights_s3_uri    = "s3://${var.weights_bucket_name}/${var.weights_prefix}"

  # Durable turns: the agent's Strands S3 storage under this prefix of the weight bucket (null: in memory).
  session_prefix = var.agent_session_storage == "s3" ? "sessions/${local.agent_runtime_name}/" : null
  session_environment = local.session_prefix == null ? {} : {
    AGENT_SESSION_BUCKET = var.weights_bucket_name
    AGENT_SESSION_PREFIX = trimsuffix(local.session_prefix, "/")
  }
}

module "iam" {
  source = "../modules/iam"

  name                 = var.name
  endpoint_name        = local.endpoint_name
  weights_bucket_arn   = local.weights_bucket_arn
  weights_prefix       = var.weights_prefix
  weights_kms_key_arn  = var.weights_kms_key_arn
  tts_repository_arn   = local.tts_repository_arn
  agent_repository_arn = local.agent_repository_arn
  agent_runtime_name   = local.agent_runtime_name
  bedrock_model_id     = var.bedrock_model_id
  session_prefix       = local.session_prefix

  permissions_boundary_arn = local.role_boundary_arn
}

module "sagemaker_endpoint" {
  source = "../modules/sagemaker_endpoint"

  name                                 = local.endpoint_name
  execution_role_arn                   = module.iam.sagemaker_role_arn
  image_uri                            = var.tts_image_uri
  model_data_s3_uri                    = local.weights_s3_uri
  environment                          = var.tts_environment
  instance_type                        = var.instance_type
  inference_ami_version                = var.inference_ami_version
  initial_instance_count               = var.initial_instance_count
  min_instance_count                   = var.min_instance_count
  max_instance_count                   = var.max_instance_count
  enable_autoscaling                   = var.enable_autoscaling
  target_concurrent_requests_per_model = var.target_concurrent_requests_per_model
  gpu_stream_slots                     = var.gpu_stream_slots
  log_retention_days                   = var.log_retention_days

  # The GPU instances bill from the moment the endpoint is created: the runtime (and its role and the
  # service-linked role its first creation makes), which are cheap and can fail, come first.
  depends_on = [module.agentcore_runtime]
}

module "agentcore_runtime" {
  source = "../modules/agentcore_runtime"

  name                   = local.agent_runtime_name
  image_uri              = var.agent_image_uri
  role_arn               = module.iam.agent_runtime_role_arn
  tts_endpoint_name      = local.endpoint_name # the name, not the resource: the runtime does not wait for it
  bedrock_model_id       = var.bedrock_model_id
  region                 = var.region
  environment            = merge(local.session_environment, var.agent_environment)
  enable_runtime_outputs = var.enable_runtime_outputs
  log_retention_days     = var.log_retention_days
}
