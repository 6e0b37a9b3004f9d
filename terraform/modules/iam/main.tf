data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  partition  = data.aws_partition.current.partition
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id
  logs_arn   = "arn:${local.partition}:logs:${local.region}:${local.account_id}:log-group"
  # Built from the name, not read from the endpoint: the roles are complete before the endpoint and the
  # runtime exist. SageMaker ARNs carry the endpoint name in lower case.
  endpoint_arn = "arn:${local.partition}:sagemaker:${local.region}:${local.account_id}:endpoint/${lower(var.endpoint_name)}"

  # Cross-region inference profiles carry a geography prefix (us., eu., apac., global. ...) before the
  # model id; they route to the foundation model in any of the geography's regions, hence region "*".
  profile_match        = regex("^((?:us-gov|us|eu|apac|jp|au|ca|global)\\.)?(.+)$", var.bedrock_model_id)
  is_inference_profile = local.profile_match[0] != null
  foundation_model_id  = local.profile_match[1]
  bedrock_model_arns = compact([
    "arn:${local.partition}:bedrock:${local.is_inference_profile ? "*" : local.region}::foundation-model/${local.foundation_model_id}",
    local.is_inference_profile ? "arn:${local.partition}:bedrock:${local.region}:${local.account_id}:inference-profile/${var.bedrock_model_id}" : "",
  ])

  # ecr:GetAuthorizationToken has no resource-level permissions: AWS only accepts "*" for it.
  ecr_auth_statement = {
    Sid      = "EcrAuthToken"
    Effect   = "Allow"
    Action   = ["ecr:GetAuthorizationToken"]
    Resource = "*"
  }
  # Third-party models (Anthropic, ...) are AWS Marketplace products: the first call in an account subscribes
  # with the caller's aws-marketplace permissions (Bedrock user guide, "Request access to models"). Amazon's own
  # models have no product id and need none. Only Subscribe accepts the aws-marketplace:ProductId condition.
  marketplace_statements = [for statement in [
    {
      Sid      = "MarketplaceViewSubscriptions"
      Effect   = "Allow"
      Action   = ["aws-marketplace:ViewSubscriptions"]
      Resource = "*"
    },
    merge(
      {
        Sid      = "MarketplaceSubscribe"
        Effect   = "Allow"
        Action   = ["aws-marketplace:Subscribe"]
        Resource = "*"
      },
      length(var.bedrock_marketplace_product_ids) == 0 ? {} : {
        Condition = { "ForAnyValue:StringEquals" = { "aws-marketplace:ProductId" = var.bedrock_marketplace_product_ids } }
      },
    ),
  ] : statement if !startswith(local.foundation_model_id, "amazon.")]

  # Durable conversation turns (Strands' S3 storage): read, write and forget them under the prefix. ListBucket on
  # the bucket itself, unconditioned: without it S3 answers a new session's missing snapshot with 403 instead of
  # 404, and a prefix condition does not apply to that check (a GetObject carries no s3:prefix).
  session_statements = [for statement in [
    {
      Sid      = "SessionTurns"
      Effect   = "Allow"
      Action   = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
      Resource = "${var.weights_bucket_arn}/${coalesce(var.session_prefix, "-")}*"
    },
    {
      Sid      = "FindSessionTurns"
      Effect   = "Allow"
      Action   = ["s3:ListBucket"]
      Resource = var.weights_bucket_arn
    },
    {
      # The bucket's SSE-KMS key: a write needs a data key, a read its decryption, both only through S3.
      Sid       = "SessionTurnsKey"
      Effect    = "Allow"
      Action    = ["kms:Decrypt", "kms:GenerateDataKey"]
      Resource  = coalesce(var.weights_kms_key_arn, "-")
      Condition = { StringEquals = { "kms:ViaService" = "s3.${local.region}.amazonaws.com" } }
    },
  ] : statement if var.session_prefix != null && (statement.Sid != "SessionTurnsKey" || var.weights_kms_key_arn != null)]

  kms_statements = var.weights_kms_key_arn == null ? [] : [{
    Sid      = "DecryptWeights"
    Effect   = "Allow"
    Action   = ["kms:Decrypt"]
    Resource = var.weights_kms_key_arn
    # Only for S3 reads made on the role's behalf, not direct use of the key.
    Condition = { StringEquals = { "kms:ViaService" = "s3.${local.region}.amazonaws.com" } }
  }]
}

################################################################################
# SageMaker execution role
################################################################################

resource "aws_iam_role" "sagemaker" {
  name                 = "${var.name}-sagemaker"
  description          = "Execution role of the ${var.endpoint_name} SageMaker endpoint"
  permissions_boundary = var.permissions_boundary_arn
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "sagemaker.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })

  tags = var.tags
}

resource "aws_iam_role_policy" "sagemaker" {
  name = "endpoint"
  role = aws_iam_role.sagemaker.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid      = "ReadWeights"
        Effect   = "Allow"
        Action   = ["s3:GetObject"]
        Resource = "${var.weights_bucket_arn}/${var.weights_prefix}*"
      },
      {
        Sid       = "ListWeights"
        Effect    = "Allow"
        Action    = ["s3:ListBucket"]
        Resource  = var.weights_bucket_arn
        Condition = { StringLike = { "s3:prefix" = [var.weights_prefix, "${var.weights_prefix}*"] } }
      },
      {
        Sid      = "PullImage"
        Effect   = "Allow"
        Action   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
        Resource = var.tts_repository_arn
      },
      local.ecr_auth_statement,
      {
        Sid    = "WriteLogs"
        Effect = "Allow"
        Action = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
        Resource = [
          "${local.logs_arn}:/aws/sagemaker/Endpoints/${var.endpoint_name}",
          "${local.logs_arn}:/aws/sagemaker/Endpoints/${var.endpoint_name}:*",
        ]
      },
      {
        # The CreateModel execution-role template of the SageMaker developer guide; PutMetricData has no
        # resource-level permissions.
        Sid      = "Metrics"
        Effect   = "Allow"
        Action   = ["cloudwatch:PutMetricData"]
        Resource = "*"
      },
    ], local.kms_statements)
  })
}

################################################################################
# AgentCore runtime role
################################################################################

resource "aws_iam_role" "agent_runtime" {
  name                 = "${var.name}-agentcore"
  description          = "Execution role of the ${var.agent_runtime_name} AgentCore runtime"
  permissions_boundary = var.permissions_boundary_arn
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "bedrock-agentcore.amazonaws.com" }
      Action    = "sts:AssumeRole"
      # Confused-deputy guard: only AgentCore acting for this account may assume the role.
      Condition = {
        StringEquals = { "aws:SourceAccount" = local.account_id }
        ArnLike      = { "aws:SourceArn" = "arn:${local.partition}:bedrock-agentcore:${local.region}:${local.account_id}:*" }
      }
    }]
  })

  tags = var.tags
}

resource "aws_iam_role_policy" "agent_runtime" {
  name = "runtime"
  role = aws_iam_role.agent_runtime.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([
      {
        Sid      = "PullImage"
        Effect   = "Allow"
        Action   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
        Resource = var.agent_repository_arn
      },
      local.ecr_auth_statement,
      {
        # Runtime log groups are named /aws/bedrock-agentcore/runtimes/<runtime id>-<endpoint>, and the
        # runtime id starts with the runtime name. No CreateLogGroup: Terraform creates the group (with
        # retention) right after the runtime, so nothing else races it to the name.
        Sid    = "WriteLogs"
        Effect = "Allow"
        Action = ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
        Resource = [
          "${local.logs_arn}:/aws/bedrock-agentcore/runtimes/${var.agent_runtime_name}-*",
          "${local.logs_arn}:/aws/bedrock-agentcore/runtimes/${var.agent_runtime_name}-*:*",
        ]
      },
      {
        # AgentCore's execution-role template (AgentCore developer guide, "Permissions for AgentCore Runtime").
        Sid      = "DescribeLogGroups"
        Effect   = "Allow"
        Action   = ["logs:DescribeLogGroups"]
        Resource = ["${local.logs_arn}:*"]
      },
      {
        # X-Ray trace APIs have no resource-level permissions: AWS only accepts "*". The sampling calls are the
        # ADOT exporter's (the same template).
        Sid      = "Traces"
        Effect   = "Allow"
        Action   = ["xray:GetSamplingRules", "xray:GetSamplingTargets", "xray:PutTelemetryRecords", "xray:PutTraceSegments"]
        Resource = "*"
      },
      {
        # PutMetricData has no resource-level permissions; the namespace condition is the scope.
        Sid       = "Metrics"
        Effect    = "Allow"
        Action    = ["cloudwatch:PutMetricData"]
        Resource  = "*"
        Condition = { StringEquals = { "cloudwatch:namespace" = var.metrics_namespace } }
      },
      {
        Sid      = "InvokeModel"
        Effect   = "Allow"
        Action   = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
        Resource = local.bedrock_model_arns
      },
      {
        Sid    = "InvokeTtsEndpoint"
        Effect = "Allow"
        Action = [
          "sagemaker:InvokeEndpoint",
          "sagemaker:InvokeEndpointWithBidirectionalStream",
          "sagemaker:InvokeEndpointWithResponseStream",
        ]
        Resource = local.endpoint_arn
      },
    ], local.marketplace_statements, local.session_statements)
  })
}
