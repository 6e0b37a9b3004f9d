data "aws_region" "current" {}

locals {
  # AgentRuntimeName must match [a-zA-Z][a-zA-Z0-9_]{0,47}.
  runtime_name = substr(replace(var.name, "/[^A-Za-z0-9_]/", "_"), 0, 48)
  # CloudFormation stack names allow hyphens but not underscores.
  stack_name = replace(local.runtime_name, "_", "-")

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
            EnvironmentVariables = merge(var.environment, {
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
