output "runtime_name" {
  description = "AgentRuntimeName after sanitizing."
  value       = local.runtime_name
}

output "runtime_arn" {
  description = "ARN of the runtime (null when enable_runtime_outputs is false)."
  value       = var.enable_runtime_outputs ? aws_cloudformation_stack.this.outputs["AgentRuntimeArn"] : null
}

output "runtime_id" {
  description = "Id of the runtime (null when enable_runtime_outputs is false)."
  value       = var.enable_runtime_outputs ? aws_cloudformation_stack.this.outputs["AgentRuntimeId"] : null
}

output "stack_id" {
  description = "Id of the CloudFormation stack that owns the runtime."
  value       = aws_cloudformation_stack.this.id
}

output "container_uri" {
  description = "Image the runtime runs."
  value       = local.deployed_runtime.AgentRuntimeArtifact.ContainerConfiguration.ContainerUri
}

output "role_arn" {
  description = "Execution role of the runtime."
  value       = local.deployed_runtime.RoleArn
}

output "environment_variables" {
  description = "Environment variables the runtime receives."
  value       = local.deployed_runtime.EnvironmentVariables
}

output "log_group_name" {
  description = "CloudWatch log group of the runtime's DEFAULT endpoint (null when enable_runtime_outputs is false)."
  value       = one(aws_cloudwatch_log_group.runtime[*].name)
}
