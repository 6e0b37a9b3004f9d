# The role ARNs wait for the inline policies, so nothing starts with a role that cannot yet pull or read.

output "sagemaker_role_arn" {
  description = "ARN of the SageMaker execution role (available once its policy is attached)."
  value       = aws_iam_role.sagemaker.arn
  depends_on  = [aws_iam_role_policy.sagemaker]
}

output "sagemaker_role_name" {
  description = "Name of the SageMaker execution role."
  value       = aws_iam_role.sagemaker.name
}

output "sagemaker_role_policy" {
  description = "Inline policy document of the SageMaker execution role (JSON)."
  value       = aws_iam_role_policy.sagemaker.policy
}

output "agent_runtime_role_arn" {
  description = "ARN of the AgentCore runtime role (available once its policy is attached)."
  value       = aws_iam_role.agent_runtime.arn
  depends_on  = [aws_iam_role_policy.agent_runtime]
}

output "agent_runtime_role_name" {
  description = "Name of the AgentCore runtime role."
  value       = aws_iam_role.agent_runtime.name
}

output "agent_runtime_role_policy" {
  description = "Inline policy document of the AgentCore runtime role (JSON)."
  value       = aws_iam_role_policy.agent_runtime.policy
}

output "endpoint_arn" {
  description = "ARN of the endpoint the agent role may invoke, built from endpoint_name."
  value       = local.endpoint_arn
}

output "permissions_boundaries" {
  description = "Permissions boundary of each role, by role name (null where a role has none)."
  value = {
    (aws_iam_role.sagemaker.name)     = aws_iam_role.sagemaker.permissions_boundary
    (aws_iam_role.agent_runtime.name) = aws_iam_role.agent_runtime.permissions_boundary
  }
}
