output "endpoint_name" {
  description = "SageMaker endpoint name (the agent's TTS_ENDPOINT_NAME)."
  value       = module.sagemaker_endpoint.endpoint_name
}

output "endpoint_arn" {
  description = "SageMaker endpoint ARN."
  value       = module.sagemaker_endpoint.endpoint_arn
}

output "sagemaker_model_name" {
  description = "SageMaker model in service."
  value       = module.sagemaker_endpoint.model_name
}

output "instance_type" {
  description = "Instance type of the endpoint's variant."
  value       = module.sagemaker_endpoint.instance_type
}

output "inference_ami_version" {
  description = "InferenceAmiVersion of the endpoint's variant (null on CPU instance types)."
  value       = module.sagemaker_endpoint.inference_ami_version
}

output "autoscaling_resource_id" {
  description = "Application Auto Scaling resource id of the variant (null without autoscaling)."
  value       = module.sagemaker_endpoint.autoscaling_resource_id
}

output "autoscaling_target" {
  description = "Autoscaling target: concurrent requests (open TTS sessions) per instance (null without autoscaling)."
  value       = module.sagemaker_endpoint.autoscaling_target
}

output "autoscaling_target_source" {
  description = "Where the autoscaling target comes from (derived, extrapolated, estimate or override, with the figures; null without autoscaling)."
  value       = module.sagemaker_endpoint.autoscaling_target_source
}

output "endpoint_log_group" {
  description = "CloudWatch log group of the endpoint's containers."
  value       = module.sagemaker_endpoint.log_group_name
}

output "agent_runtime_log_group" {
  description = "CloudWatch log group of the runtime's DEFAULT endpoint (null when enable_runtime_outputs is false)."
  value       = module.agentcore_runtime.log_group_name
}

output "agent_runtime_arn" {
  description = "AgentCore runtime ARN to invoke (null when enable_runtime_outputs is false)."
  value       = module.agentcore_runtime.runtime_arn
}

output "agent_runtime_id" {
  description = "AgentCore runtime id (null when enable_runtime_outputs is false)."
  value       = module.agentcore_runtime.runtime_id
}

output "agent_runtime_name" {
  description = "AgentCore runtime name."
  value       = module.agentcore_runtime.runtime_name
}

output "agent_runtime_stack_id" {
  description = "CloudFormation stack that owns the runtime."
  value       = module.agentcore_runtime.stack_id
}

output "sagemaker_role_arn" {
  description = "Execution role of the endpoint."
  value       = module.iam.sagemaker_role_arn
}

output "agent_runtime_role_arn" {
  description = "Execution role of the agent runtime."
  value       = module.iam.agent_runtime_role_arn
}

output "agent_session_store" {
  description = "Where the agent keeps its conversations' turns: s3://<weight bucket>/sessions/<runtime>/ when agent_session_storage is s3, null when they stay in memory."
  value       = local.session_prefix == null ? null : "s3://${var.weights_bucket_name}/${local.session_prefix}"
}
