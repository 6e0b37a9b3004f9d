data "aws_region" "current" {}

locals {
  # AgentRuntimeName must match [a-zA-Z][a-zA-Z0-9_]{0,47}.
  runtime_name = substr(replace(var.name, "/[^A-Za-z0-9_]/", "_"), 0, 48)
  # CloudFormation stack names allow hyphens but not underscores.
  stack_name = replace(local.runtime_name, "_", "-")

  # ADOT (the image runs under opentelemetry-instrument) exports the agent's traces to X-Ray when this is true, as
  # AgentCore observability documents; var.environment may override either (AGENT_OBSERVABILITY_ENABLED=false).
  observability = {
    AGENT_OBSERVABILITY_ENABLED = "true"
    OTEL_RESOURCE_ATTRIBUTES    = "service.name=${local.runtime_name}"
  }

  runtime_outputs = {
    AgentRuntimeArn = { Value = { "Fn::GetAtt" = ["Runtime", "AgentRuntimeArn"] } }
    AgentRuntimeId  = { Value = { "Fn::GetAtt" = ["Runtime", "AgentRuntimeId"] } }
  }

  # The provider (5.x) has no AgentCore Runtime resource yet, so CloudFormation creates it. A native
  # resource would replace this stack inside this module without changing its interface.
  template = merge(
    {
      AWSTemplateFormatVersion = "2010-09-09"
      Description              = "AgentCore runtime ${local.runtime_name} (managed by Terraform)"
      Resources = {
        Runtime = {
          Type = "AWS::BedrockAgentCore::Runtime"
          Properties = {
            AgentRuntimeName = local.runtime_name
            Description      = var.description
            AgentRuntimeArtifact = {
              ContainerConfiguration = { ContainerUri = var.image_uri }
            }
            RoleArn               = var.role_arn
            NetworkConfiguration  = { NetworkMode = "PUBLIC" }
            ProtocolConfiguration = "HTTP"
            EnvironmentVariables = merge(local.observability, var.environment, {
              # The agent's default is its scripted stand-in; the deployed agent speaks Bedrock's words.
              AGENT_MODEL       = "bedrock"
              TTS_ENDPOINT_NAME = var.tts_endpoint_name
              AWS_REGION        = coalesce(var.region, data.aws_region.current.name)
              BEDROCK_MODEL_ID  = var.bedrock_model_id
            })
          }
        }
      }
    },
    # Without the flag the template has no Outputs section at all (an empty one is invalid).
    { for key, value in { Outputs = local.runtime_outputs } : key => value if var.enable_runtime_outputs },
  )

  # AgentCore names the log group of a runtime endpoint /aws/bedrock-agentcore/runtimes/<runtime id>-<endpoint>;
  # the runtime id exists only once the stack has created the runtime.
  runtime_id     = var.enable_runtime_outputs ? aws_cloudformation_stack.this.outputs["AgentRuntimeId"] : null
  log_group_name = local.runtime_id == null ? null : "/aws/bedrock-agentcore/runtimes/${local.runtime_id}-DEFAULT"

  # What the stack really carries, for outputs and tests.
  deployed_runtime = jsondecode(aws_cloudformation_stack.this.template_body).Resources.Runtime.Properties
}

resource "aws_cloudformation_stack" "this" {
  #checkov:skip=CKV_AWS_124:Terraform reports the stack's failures itself; pass notification_arns where the account routes stack events to SNS.
  name               = local.stack_name
  template_body      = jsonencode(local.template)
  notification_arns  = var.notification_arns
  on_failure         = "DELETE"
  timeout_in_minutes = var.timeout_minutes

  # CloudFormation passes stack tags on to the runtime.
  tags = var.tags
}

# Created right after the runtime, before anything invokes it; the runtime's role may write to it but not create
# it, so this resource is its only creator and destroy removes it.
resource "aws_cloudwatch_log_group" "runtime" {
  #checkov:skip=CKV_AWS_158:Log groups are encrypted by CloudWatch Logs by default; pass log_kms_key_arn for a customer-managed key.
  #checkov:skip=CKV_AWS_338:Retention is log_retention_days (default 30): agent logs are for debugging, not an audit trail.
  count = var.enable_runtime_outputs ? 1 : 0

  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn

  tags = var.tags
}
