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
