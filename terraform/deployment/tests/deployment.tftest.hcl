# Plans and applies the deployment root against a mocked AWS provider: no credentials, no network.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
  }
  mock_resource "aws_sagemaker_endpoint" {
    defaults = { arn = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/kokoro-tts" }
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

override_resource {
  target = module.iam.aws_iam_role.agent_runtime
  values = { arn = "arn:aws:iam::123456789012:role/kokoro-tts-agentcore" }
}

override_resource {
  target = module.iam.aws_iam_role.sagemaker
  values = { arn = "arn:aws:iam::123456789012:role/kokoro-tts-sagemaker" }
}

variables {
  tts_image_uri       = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts@sha256:1111111111111111111111111111111111111111111111111111111111111111"
  agent_image_uri     = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
  weights_bucket_name = "kokoro-weights-test"
  weights_prefix      = "kokoro-82m/v1.0/"
  weights_kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
  bedrock_model_id    = "us.amazon.nova-2-lite-v1:0"
}

run "plan_endpoint" {
  command = plan

  assert {
    condition     = module.sagemaker_endpoint.image_uri == var.tts_image_uri
    error_message = "The model must run the TTS image pinned by digest."
  }

  assert {
    condition     = module.sagemaker_endpoint.instance_type == "ml.g5.xlarge"
    error_message = "The default instance type is ml.g5.xlarge."
  }

  # Driver 550 (CUDA 12.4) instead of the default host's 470: the image's CUDA 12 torch needs >= 525.
  assert {
    condition     = output.inference_ami_version == "al2-ami-sagemaker-inference-gpu-3-1"
    error_message = "A GPU variant must run on the al2-ami-sagemaker-inference-gpu-3-1 host image."
  }

  assert {
    condition = module.sagemaker_endpoint.model_data_source == {
      s3_uri           = "s3://kokoro-weights-test/kokoro-82m/v1.0/"
      s3_data_type     = "S3Prefix"
      compression_type = "None"
    }
    error_message = "The weights come uncompressed from the versioned S3 prefix."
  }
}

run "apply_roles_and_runtime" {
  assert {
    condition     = output.endpoint_arn == "arn:aws:sagemaker:us-east-1:123456789012:endpoint/kokoro-tts"
    error_message = "endpoint_arn must come from the endpoint."
  }

  assert {
    condition     = module.agentcore_runtime.environment_variables["AGENT_MODEL"] == "bedrock"
    error_message = "The deployed agent must run on Bedrock (AGENT_MODEL=bedrock), not its scripted stand-in."
  }

  assert {
    condition     = output.endpoint_log_group == "/aws/sagemaker/Endpoints/kokoro-tts" && module.sagemaker_endpoint.log_group_name == output.endpoint_log_group
    error_message = "Terraform owns the endpoint's log group."
  }

  # The ARN the agent role may invoke is built from the name, so the role does not wait for the endpoint.
  assert {
    condition     = module.iam.endpoint_arn == output.endpoint_arn
    error_message = "The role's endpoint ARN (built from the name) must be the endpoint's real ARN."
  }

  assert {
    condition     = output.agent_runtime_log_group == "/aws/bedrock-agentcore/runtimes/kokoro_tts_agent-abcdef1234-DEFAULT"
    error_message = "Terraform owns the runtime's log group, named after the runtime id."
  }

  assert {
    condition = alltrue([
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : !contains(flatten([s.Action]), "logs:CreateLogGroup")
    ])
    error_message = "Only Terraform creates the runtime's log group (with its retention)."
  }

  # The agent may call this endpoint, with the three invoke actions, and nothing else in SageMaker.
  assert {
    condition = [
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : { actions = s.Action, resource = s.Resource }
      if length([for a in flatten([s.Action]) : a if startswith(a, "sagemaker:")]) > 0
      ] == [{
        actions = [
          "sagemaker:InvokeEndpoint",
          "sagemaker:InvokeEndpointWithBidirectionalStream",
          "sagemaker:InvokeEndpointWithResponseStream",
        ]
        resource = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/kokoro-tts"
    }]
    error_message = "The agent role must allow exactly the three SageMaker invoke actions on exactly this endpoint."
  }

  assert {
    condition = alltrue(flatten([
      for doc in [module.iam.agent_runtime_role_policy, module.iam.sagemaker_role_policy] : [
        for s in jsondecode(doc).Statement : [for a in flatten([s.Action]) : !strcontains(a, "*")]
      ]
    ]))
    error_message = "No statement may use a wildcard action."
  }

  # Only actions without resource-level permissions may use Resource "*".
  assert {
    condition = sort(flatten([
      for doc in [module.iam.agent_runtime_role_policy, module.iam.sagemaker_role_policy] : [
        for s in jsondecode(doc).Statement : flatten([s.Action]) if contains(flatten([s.Resource]), "*")
      ]
      ])) == sort([
      "cloudwatch:PutMetricData",
      "cloudwatch:PutMetricData",
      "ecr:GetAuthorizationToken",
      "ecr:GetAuthorizationToken",
      "xray:GetSamplingRules",
      "xray:GetSamplingTargets",
      "xray:PutTelemetryRecords",
      "xray:PutTraceSegments",
    ])
    error_message = "Resource \"*\" is only for ecr:GetAuthorizationToken, X-Ray and PutMetricData (no Marketplace for an Amazon model)."
  }

  # Every role the deployment creates carries the boundary an administrator created once (docs/deploy.md).
  assert {
    condition = module.iam.permissions_boundaries == {
      "kokoro-tts-sagemaker" = "arn:aws:iam::123456789012:policy/kokoro-tts-role-boundary"
      "kokoro-tts-agentcore" = "arn:aws:iam::123456789012:policy/kokoro-tts-role-boundary"
    }
    error_message = "Both roles must carry the kokoro-tts-role-boundary permissions boundary."
  }

  # AgentCore's and SageMaker's execution-role templates: what the ADOT exporter and the container's metrics call.
  assert {
    condition = alltrue([
      for a in ["xray:GetSamplingRules", "xray:GetSamplingTargets", "logs:DescribeLogGroups"] :
      contains(flatten([for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Action]), a)
    ]) && contains(flatten([for s in jsondecode(module.iam.sagemaker_role_policy).Statement : s.Action]), "cloudwatch:PutMetricData")
    error_message = "The runtime role needs X-Ray sampling and DescribeLogGroups, the SageMaker role PutMetricData."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Condition.StringEquals["cloudwatch:namespace"]
      if contains(flatten([s.Action]), "cloudwatch:PutMetricData")
    ] == ["bedrock-agentcore"]
    error_message = "PutMetricData must be limited to the agent's namespace."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Resource
      if contains(flatten([s.Action]), "bedrock:InvokeModel")
      ] == [[
        "arn:aws:bedrock:*::foundation-model/amazon.nova-2-lite-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.amazon.nova-2-lite-v1:0",
    ]]
    error_message = "Bedrock access must be limited to the chosen model's foundation-model and inference-profile ARNs."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.sagemaker_role_policy).Statement : s.Resource
      if contains(flatten([s.Action]), "s3:GetObject")
    ] == ["arn:aws:s3:::kokoro-weights-test/kokoro-82m/v1.0/*"]
    error_message = "The endpoint may read only its weight prefix."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.sagemaker_role_policy).Statement : s.Condition.StringLike["s3:prefix"]
      if contains(flatten([s.Action]), "s3:ListBucket")
    ] == [["kokoro-82m/v1.0/", "kokoro-82m/v1.0/*"]]
    error_message = "ListBucket must be limited to the weight prefix."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.sagemaker_role_policy).Statement : s.Resource
      if contains(flatten([s.Action]), "ecr:BatchGetImage")
    ] == ["arn:aws:ecr:us-east-1:123456789012:repository/kokoro-tts/tts"]
    error_message = "The endpoint may pull only from the TTS repository."
  }

  assert {
    condition     = module.agentcore_runtime.container_uri == var.agent_image_uri
    error_message = "The runtime must run the agent image pinned by digest."
  }

  assert {
    condition     = module.agentcore_runtime.role_arn == "arn:aws:iam::123456789012:role/kokoro-tts-agentcore"
    error_message = "The runtime must run as the AgentCore role."
  }

  assert {
    condition = module.agentcore_runtime.environment_variables == {
      AGENT_MODEL                 = "bedrock"
      TTS_ENDPOINT_NAME           = "kokoro-tts"
      AWS_REGION                  = "us-east-1"
      BEDROCK_MODEL_ID            = "us.amazon.nova-2-lite-v1:0"
      AGENT_OBSERVABILITY_ENABLED = "true"
      OTEL_RESOURCE_ATTRIBUTES    = "service.name=kokoro_tts_agent"
    }
    error_message = "The runtime needs AGENT_MODEL=bedrock, the endpoint name, the region, the model id and ADOT's switch."
  }

  assert {
    condition     = output.agent_runtime_name == "kokoro_tts_agent"
    error_message = "The runtime name must be sanitized to letters, digits and underscores."
  }

  assert {
    condition     = output.agent_runtime_arn == "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/kokoro_tts_agent-abcdef1234"
    error_message = "agent_runtime_arn must come from the stack outputs."
  }

  assert {
    condition     = module.sagemaker_endpoint.autoscaling_resource_id == "endpoint/kokoro-tts/variant/AllTraffic"
    error_message = "Autoscaling must target the endpoint's variant."
  }

  # The default type is a GPU type; without make gpu-check's slots the target says it is an estimate: 16 slots
  # assumed, the target below them by the headroom (capacity.tf).
  assert {
    condition     = output.autoscaling_target == 10 && startswith(output.autoscaling_target_source, "estimate: ml.g5.xlarge is a GPU type")
    error_message = "On ml.g5.xlarge without a measurement the target is the labelled estimate: 10 below 16 slots."
  }
}

# make gpu-check's slots (passed by make deploy from bench/results/gpu.json) replace the estimate on a GPU type.
run "gpu_target_comes_from_the_measured_slots" {
  command = plan

  variables {
    gpu_stream_slots = { slots = 40, source = "make gpu-check on NVIDIA H200 (bench/results/gpu.json)" }
  }

  assert {
    condition     = output.autoscaling_target == 30 && startswith(output.autoscaling_target_source, "measured: make gpu-check on NVIDIA H200")
    error_message = "40 measured slots: target 30 (m + 1.645 sqrt(m) <= 40), marked measured."
  }
}

# The slots of a CPU type are the server's, floor(0.8 * 8.76 / 2 * vCPUs); the target leaves the headroom below.
run "measured_gpu_slots_do_not_apply_to_a_cpu_type" {
  command = plan

  variables {
    instance_type    = "ml.c7i.xlarge"
    gpu_stream_slots = { slots = 40, source = "make gpu-check" }
  }

  assert {
    condition     = output.autoscaling_target == 9 && startswith(output.autoscaling_target_source, "derived: ")
    error_message = "A CPU type's target comes from its vCPUs, whatever a GPU measured."
  }
}

run "cpu_target_is_derived_from_the_measurement" {
  command = plan

  variables {
    instance_type = "ml.c7i.xlarge"
  }

  assert {
    condition     = output.autoscaling_target == 9
    error_message = "ml.c7i.xlarge (4 vCPUs): floor(0.8 * 4.38 * 4) = 14 slots, target 9 (9 + 1.645 * 3 <= 14)."
  }

  assert {
    condition     = startswith(output.autoscaling_target_source, "derived: floor(0.8 headroom * 4.38 s of audio per second per vCPU * 4 vCPUs) = 14 stream slots") && strcontains(output.autoscaling_target_source, "target 9: the largest mean m with m + 1.645 sqrt(m) <= 14 stream slots")
    error_message = "The source of a c7i target names the formula and its figures."
  }
}

run "cpu_target_on_another_cpu_is_extrapolated" {
  command = plan

  variables {
    instance_type = "ml.m5.large"
  }

  assert {
    condition     = output.autoscaling_target == 3 && startswith(output.autoscaling_target_source, "extrapolated: ")
    error_message = "ml.m5.large (2 vCPUs, an older CPU than the one measured): 7 slots, target 3, marked extrapolated."
  }
}

run "an_explicit_target_wins" {
  command = plan

  variables {
    instance_type                        = "ml.c7i.xlarge"
    target_concurrent_requests_per_model = 5
  }

  assert {
    condition     = output.autoscaling_target == 5
    error_message = "target_concurrent_requests_per_model overrides the derived target."
  }

  assert {
    condition     = output.autoscaling_target_source == "override: target_concurrent_requests_per_model = 5 (the derived figure would be 9)"
    error_message = "The source of an override says so and what the derivation would give."
  }
}

run "rejects_a_target_that_is_not_positive" {
  command = plan

  variables {
    target_concurrent_requests_per_model = 0
  }

  expect_failures = [var.target_concurrent_requests_per_model]
}

# What the moto run uses: a CPU instance type moto accepts, no autoscaling, no stack outputs.
# A third-party model is an AWS Marketplace product: its first call subscribes with the runtime role's permissions.
run "marketplace_for_a_third_party_model" {
  command = plan

  variables {
    bedrock_model_id = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
  }

  assert {
    condition = sort(flatten([
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Action if startswith(s.Sid, "Marketplace")
    ])) == tolist(["aws-marketplace:Subscribe", "aws-marketplace:ViewSubscriptions"])
    error_message = "The runtime role of an Anthropic model must be able to view and make the Marketplace subscription."
  }
}

run "emulator_settings" {
  variables {
    instance_type          = "ml.m5.large"
    enable_autoscaling     = false
    enable_runtime_outputs = false
  }

  assert {
    condition     = module.sagemaker_endpoint.instance_type == "ml.m5.large"
    error_message = "instance_type must reach the endpoint configuration."
  }

  assert {
    condition     = module.sagemaker_endpoint.autoscaling_resource_id == null
    error_message = "enable_autoscaling = false must leave the variant unregistered."
  }

  assert {
    condition     = output.autoscaling_target == null && output.autoscaling_target_source == null
    error_message = "Without autoscaling there is no target."
  }

  assert {
    condition     = output.inference_ami_version == null
    error_message = "A CPU variant gets no InferenceAmiVersion (the GPU host images are for ml.g*/ml.p* only)."
  }

  assert {
    condition     = output.agent_runtime_log_group == null
    error_message = "Without the runtime id there is no runtime log group."
  }

  assert {
    condition     = output.agent_runtime_arn == null
    error_message = "Without runtime outputs the ARN is null."
  }
}

run "rejects_min_above_max" {
  command = plan

  variables {
    min_instance_count     = 3
    max_instance_count     = 2
    initial_instance_count = 2
  }

  expect_failures = [var.max_instance_count]
}

run "rejects_a_non_sagemaker_instance_type" {
  command = plan

  variables {
    instance_type = "g5.xlarge"
  }

  expect_failures = [var.instance_type]
}

run "rejects_an_empty_model_id" {
  command = plan

  variables {
    bedrock_model_id = " "
  }

  expect_failures = [var.bedrock_model_id]
}

run "rejects_an_image_by_tag" {
  command = plan

  variables {
    tts_image_uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-tts/tts:latest"
  }

  expect_failures = [var.tts_image_uri]
}

run "rejects_an_image_from_another_region" {
  command = plan

  variables {
    agent_image_uri = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/kokoro-tts/agent@sha256:2222222222222222222222222222222222222222222222222222222222222222"
  }

  expect_failures = [var.agent_image_uri]
}

run "rejects_an_ami_version_the_provider_rejects" {
  command = plan

  variables {
    inference_ami_version = "al2023-ami-sagemaker-inference-gpu-4-1"
  }

  expect_failures = [var.inference_ami_version]
}

run "rejects_a_graviton_instance_type" {
  command = plan

  variables {
    instance_type = "ml.c7g.xlarge"
  }

  expect_failures = [var.instance_type]
}

run "durable_turns_in_the_weight_bucket" {
  command = plan

  variables {
    agent_session_storage = "s3"
  }

  assert {
    condition = module.agentcore_runtime.environment_variables["AGENT_SESSION_BUCKET"] == "kokoro-weights-test" && (
    module.agentcore_runtime.environment_variables["AGENT_SESSION_PREFIX"] == "sessions/kokoro_tts_agent")
    error_message = "With s3 the agent keeps its turns in the weight bucket under sessions/<runtime>."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Resource if s.Sid == "SessionTurns"
    ] == ["arn:aws:s3:::kokoro-weights-test/sessions/kokoro_tts_agent/*"]
    error_message = "The runtime role reads and writes the turns under its own prefix only."
  }

  assert {
    condition = [
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s.Action if s.Sid == "SessionTurnsKey"
    ] == [["kms:Decrypt", "kms:GenerateDataKey"]]
    error_message = "The turns are written with the bucket's KMS key, through S3 only."
  }
}

run "turns_in_memory_by_default" {
  command = plan

  assert {
    condition     = !contains(keys(module.agentcore_runtime.environment_variables), "AGENT_SESSION_BUCKET")
    error_message = "By default the agent keeps its turns in memory."
  }

  assert {
    condition = length([
      for s in jsondecode(module.iam.agent_runtime_role_policy).Statement : s if startswith(s.Sid, "Session")
    ]) == 0
    error_message = "Without durable turns the runtime role gets no S3 access."
  }
}

run "rejects_an_unknown_session_storage" {
  command = plan

  variables {
    agent_session_storage = "dynamodb"
  }

  expect_failures = [var.agent_session_storage]
}
