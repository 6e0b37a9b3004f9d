# Module-level checks of what the root's outputs do not show: the autoscaling policy and the
# CloudFormation template of the runtime.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_resource "aws_cloudformation_stack" {
    defaults = {
      outputs = {
        AgentRuntimeArn = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/kokoro_tts_agent-abcdef1234"
        AgentRuntimeId  = "kokoro_tts_agent-abcdef1234"
      }
    }
  }
}

run "endpoint_scales_on_concurrent_streams" {
  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name                   = "kokoro-tts"
    execution_role_arn     = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri              = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri      = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    min_instance_count     = 1
    max_instance_count     = 4
    initial_instance_count = 2
  }

  assert {
    condition     = aws_appautoscaling_target.this[0].min_capacity == 1 && aws_appautoscaling_target.this[0].max_capacity == 4
    error_message = "The scalable target must use the min and max instance counts."
  }

  assert {
    condition     = aws_appautoscaling_target.this[0].scalable_dimension == "sagemaker:variant:DesiredInstanceCount"
    error_message = "Autoscaling must scale the variant's instance count."
  }

  assert {
    condition     = aws_appautoscaling_policy.this[0].target_tracking_scaling_policy_configuration[0].predefined_metric_specification[0].predefined_metric_type == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    error_message = "Target tracking must follow concurrent requests (open TTS sessions) per model."
  }

  assert {
    condition     = aws_appautoscaling_policy.this[0].target_tracking_scaling_policy_configuration[0].target_value == 10
    error_message = "The default type, ml.g5.xlarge, without make gpu-check slots: 10 open sessions per instance, below the estimated 16 slots."
  }

  assert {
    condition     = output.autoscaling_target == 10 && startswith(output.autoscaling_target_source, "estimate: ")
    error_message = "The outputs say the GPU target is an estimate."
  }

  assert {
    condition     = aws_sagemaker_endpoint_configuration.this.production_variants[0].inference_ami_version == "al2-ami-sagemaker-inference-gpu-3-1"
    error_message = "A GPU variant runs on the al2-ami-sagemaker-inference-gpu-3-1 host image (driver 550)."
  }

  assert {
    condition     = aws_cloudwatch_log_group.this.name == "/aws/sagemaker/Endpoints/kokoro-tts" && aws_cloudwatch_log_group.this.retention_in_days == 30
    error_message = "The endpoint's log group is Terraform's, with a 30-day retention."
  }

  assert {
    condition     = aws_sagemaker_endpoint_configuration.this.production_variants[0].initial_instance_count == 2
    error_message = "The variant starts with initial_instance_count instances."
  }

  assert {
    condition     = aws_sagemaker_model.this.primary_container[0].environment["KOKORO_BACKEND"] == "torch"
    error_message = "The container runs the torch backend by default."
  }

  assert {
    condition     = aws_sagemaker_model.this.enable_network_isolation
    error_message = "The container runs network-isolated by default."
  }
}

run "runtime_template" {
  module {
    source = "../modules/agentcore_runtime"
  }

  variables {
    name              = "kokoro-tts.agent"
    image_uri         = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
    role_arn          = "arn:aws:iam::123456789012:role/kokoro-tts-agentcore"
    tts_endpoint_name = "kokoro-tts"
    bedrock_model_id  = "amazon.nova-lite-v1:0"
  }

  assert {
    condition     = jsondecode(aws_cloudformation_stack.this.template_body).Resources.Runtime.Properties.EnvironmentVariables.AGENT_MODEL == "bedrock"
    error_message = "The runtime runs the agent on Bedrock."
  }

  assert {
    condition     = aws_cloudwatch_log_group.runtime[0].name == "/aws/bedrock-agentcore/runtimes/kokoro_tts_agent-abcdef1234-DEFAULT" && aws_cloudwatch_log_group.runtime[0].retention_in_days == 30
    error_message = "The runtime's log group is Terraform's, named after the runtime id, with a 30-day retention."
  }

  assert {
    condition     = jsondecode(aws_cloudformation_stack.this.template_body).Resources.Runtime.Type == "AWS::BedrockAgentCore::Runtime"
    error_message = "The stack must hold an AgentCore runtime."
  }

  assert {
    condition     = output.runtime_name == "kokoro_tts_agent" && aws_cloudformation_stack.this.name == "kokoro-tts-agent"
    error_message = "Runtime names allow no hyphens or dots; stack names allow no underscores."
  }

  assert {
    condition = (
      jsondecode(aws_cloudformation_stack.this.template_body).Resources.Runtime.Properties.NetworkConfiguration.NetworkMode == "PUBLIC" &&
      jsondecode(aws_cloudformation_stack.this.template_body).Resources.Runtime.Properties.ProtocolConfiguration == "HTTP"
    )
    error_message = "The runtime is public and speaks HTTP."
  }

  assert {
    condition = jsondecode(aws_cloudformation_stack.this.template_body).Outputs.AgentRuntimeArn.Value == {
      "Fn::GetAtt" = ["Runtime", "AgentRuntimeArn"]
    }
    error_message = "The stack must export the runtime ARN."
  }
}

run "runtime_template_without_outputs" {
  module {
    source = "../modules/agentcore_runtime"
  }

  variables {
    name                   = "kokoro_tts_agent"
    image_uri              = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
    role_arn               = "arn:aws:iam::123456789012:role/kokoro-tts-agentcore"
    tts_endpoint_name      = "kokoro-tts"
    bedrock_model_id       = "amazon.nova-lite-v1:0"
    enable_runtime_outputs = false
  }

  assert {
    condition     = !contains(keys(jsondecode(aws_cloudformation_stack.this.template_body)), "Outputs")
    error_message = "enable_runtime_outputs = false must drop the Outputs section."
  }

  assert {
    condition     = output.runtime_arn == null
    error_message = "Without outputs the runtime ARN is null."
  }
}

run "plain_model_id_gets_no_inference_profile" {
  module {
    source = "../modules/iam"
  }

  variables {
    name                 = "kokoro-tts"
    endpoint_name        = "kokoro-tts"
    weights_bucket_arn   = "arn:aws:s3:::kokoro-weights-test"
    weights_prefix       = "kokoro-82m/v1.0/"
    tts_repository_arn   = "arn:aws:ecr:us-east-1:123456789012:repository/kokoro-tts/tts"
    agent_repository_arn = "arn:aws:ecr:us-east-1:123456789012:repository/kokoro-tts/agent"
    agent_runtime_name   = "kokoro_tts_agent"
    bedrock_model_id     = "amazon.nova-lite-v1:0"
  }

  assert {
    condition = [
      for s in jsondecode(aws_iam_role_policy.agent_runtime.policy).Statement : s.Resource
      if contains(flatten([s.Action]), "bedrock:InvokeModel")
    ] == [["arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0"]]
    error_message = "A plain model id needs only its foundation-model ARN in the current region."
  }

  assert {
    condition = [
      for s in jsondecode(aws_iam_role_policy.agent_runtime.policy).Statement : s.Resource
      if contains(flatten([s.Action]), "sagemaker:InvokeEndpointWithBidirectionalStream")
    ] == ["arn:aws:sagemaker:us-east-1:123456789012:endpoint/kokoro-tts"]
    error_message = "The endpoint ARN is built from the endpoint's name."
  }

  assert {
    condition     = jsondecode(aws_iam_role.agent_runtime.assume_role_policy).Statement[0].Principal.Service == "bedrock-agentcore.amazonaws.com"
    error_message = "The runtime role must trust AgentCore."
  }

  assert {
    condition     = length([for s in jsondecode(aws_iam_role_policy.sagemaker.policy).Statement : s if contains(flatten([s.Action]), "kms:Decrypt")]) == 0
    error_message = "Without a bucket key there is no KMS statement."
  }
}

run "cpu_variant_gets_no_ami_version" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name               = "kokoro-tts"
    execution_role_arn = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri          = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri  = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    instance_type      = "ml.c7i.xlarge"
  }

  assert {
    condition     = aws_sagemaker_endpoint_configuration.this.production_variants[0].inference_ami_version == null
    error_message = "CPU instance types get no InferenceAmiVersion."
  }

  assert {
    condition     = aws_sagemaker_model.this.primary_container[0].environment["KOKORO_BACKEND"] == "onnx"
    error_message = "A CPU variant runs the onnx backend (the torch image needs CUDA)."
  }
}

run "rejects_an_unknown_ami_version" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name                  = "kokoro-tts"
    execution_role_arn    = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri             = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri     = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    inference_ami_version = "al2-ami-sagemaker-inference-gpu-9"
  }

  expect_failures = [var.inference_ami_version]
}

# SageMaker lists al2023-ami-sagemaker-inference-gpu-4-1, but the AWS provider 5.100 rejects it at validate.
run "rejects_an_ami_version_the_provider_rejects" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name                  = "kokoro-tts"
    execution_role_arn    = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri             = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri     = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    inference_ami_version = "al2023-ami-sagemaker-inference-gpu-4-1"
  }

  expect_failures = [var.inference_ami_version]
}

# The measured machine itself: 2 vCPUs of the c7i generation, where the server computed 7 stream slots.
run "cpu_target_is_the_servers_slot_count" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name               = "kokoro-tts"
    execution_role_arn = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri          = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri  = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    instance_type      = "ml.c7i.large"
  }

  assert {
    condition     = aws_appautoscaling_policy.this[0].target_tracking_scaling_policy_configuration[0].target_value == 3
    error_message = "ml.c7i.large (2 vCPUs): floor(0.8 * 8.76) = 7 slots (the server's count on the measured machine), target 3 below them."
  }

  assert {
    condition     = startswith(output.autoscaling_target_source, "derived: ")
    error_message = "A c7i target is derived from a measurement on its own CPU generation."
  }
}

# vCPU counts that do not follow the size name (c4.8xlarge: 36) and the largest type.
run "cpu_target_follows_the_vcpu_count" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name               = "kokoro-tts"
    execution_role_arn = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri          = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri  = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    instance_type      = "ml.c4.8xlarge"
  }

  assert {
    condition     = output.autoscaling_target == 108
    error_message = "ml.c4.8xlarge (36 vCPUs): floor(0.8 * 4.38 * 36) = 126 slots, target 108."
  }

  assert {
    condition     = startswith(output.autoscaling_target_source, "extrapolated: ") && strcontains(output.autoscaling_target_source, "ml.c4 has another CPU")
    error_message = "A target on another CPU than the one measured says it is extrapolated."
  }
}

# A type with no vCPU count in capacity.tf (a Graviton type: the deployment root refuses it, the module does not)
# needs an explicit target.
run "rejects_a_cpu_type_with_no_derivation" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name               = "kokoro-tts"
    execution_role_arn = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri          = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri  = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    instance_type      = "ml.c7g.xlarge"
  }

  expect_failures = [var.target_concurrent_requests_per_model]
}

run "an_explicit_target_needs_no_derivation" {
  command = plan

  module {
    source = "../modules/sagemaker_endpoint"
  }

  variables {
    name                                 = "kokoro-tts"
    execution_role_arn                   = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker"
    image_uri                            = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    model_data_s3_uri                    = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    instance_type                        = "ml.c7g.xlarge"
    target_concurrent_requests_per_model = 7.5
  }

  assert {
    condition     = output.autoscaling_target == 7.5 && output.autoscaling_target_source == "override: target_concurrent_requests_per_model = 7.5 (no figure is derived for ml.c7g.xlarge)"
    error_message = "An explicit target is used as given."
  }
}
