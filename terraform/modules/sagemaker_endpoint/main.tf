locals {
  variant_name = "AllTraffic"

  # InferenceAmiVersion picks the host's NVIDIA driver; it applies to GPU instances only (ml.g*, ml.p*), so a
  # CPU variant gets none. A GPU variant runs the torch image on CUDA, any other the onnx image on its CPUs
  # (make deploy builds the image that matches: scripts/deploy/deploy.sh).
  is_gpu_instance       = can(regex("^ml\\.[gp][0-9]", var.instance_type))
  inference_ami_version = local.is_gpu_instance ? var.inference_ami_version : null
  backend               = local.is_gpu_instance ? "torch" : "onnx"

  container = {
    image = var.image_uri
    environment = merge(
      { KOKORO_BACKEND = local.backend },
      var.environment,
    )
    model_data_s3_uri = var.model_data_s3_uri
  }
  # A model cannot be changed in place: its name hashes every setting, so a replacement gets a new name
  # and exists before the old model is deleted (create_before_destroy).
  model_settings = {
    container                = local.container
    execution_role_arn       = var.execution_role_arn
    enable_network_isolation = var.enable_network_isolation
  }
  model_name = "${var.name}-${substr(sha256(jsonencode(local.model_settings)), 0, 8)}"

  # SageMaker writes the container's logs here; Terraform creates it first, so retention applies from the
  # first line and destroy removes it.
  log_group_name = "/aws/sagemaker/Endpoints/${var.name}"
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_158:Log groups are encrypted by CloudWatch Logs by default; pass log_kms_key_arn for a customer-managed key.
  #checkov:skip=CKV_AWS_338:Retention is log_retention_days (default 30): container logs are for debugging, not an audit trail.
  name              = local.log_group_name
  retention_in_days = var.log_retention_days
  kms_key_id        = var.log_kms_key_arn

  tags = var.tags
}

resource "aws_sagemaker_model" "this" {
  name                     = local.model_name
  execution_role_arn       = var.execution_role_arn
  enable_network_isolation = var.enable_network_isolation

  primary_container {
    image       = local.container.image
    mode        = "SingleModel"
    environment = local.container.environment

    # Uncompressed prefix: SageMaker copies the files as they are into /opt/ml/model (no model.tar.gz).
    model_data_source {
      s3_data_source {
        s3_uri           = var.model_data_s3_uri
        s3_data_type     = "S3Prefix"
        compression_type = "None"
      }
    }
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_sagemaker_endpoint_configuration" "this" {
  #checkov:skip=CKV_AWS_98:ml.g5/ml.g6 instances only have NVMe instance storage, which SageMaker encrypts itself and for which it rejects a KMS key; kms_key_arn is a variable for other instance types.
  name_prefix = "${var.name}-"
  kms_key_arn = var.kms_key_arn

  production_variants {
    variant_name                                      = local.variant_name
    model_name                                        = aws_sagemaker_model.this.name
    instance_type                                     = var.instance_type
    initial_instance_count                            = var.initial_instance_count
    container_startup_health_check_timeout_in_seconds = var.container_startup_health_check_timeout
    model_data_download_timeout_in_seconds            = var.model_data_download_timeout
    inference_ami_version                             = local.inference_ami_version
  }

  tags = var.tags

  # The endpoint switches to the new configuration before the old one goes.
  # The provider's UpdateEndpoint resets the variant to the new configuration's initial_instance_count
  # (it sends no RetainAllVariantProperties: terraform-provider-aws #48990), so make deploy passes the live desired
  # count as initial_instance_count. A different count alone must not make a new configuration (and a needless
  # endpoint update): it is ignored as a change, yet a configuration replaced for any other reason is created
  # with it, so a redeploy keeps the scaled-out count.
  lifecycle {
    create_before_destroy = true
    ignore_changes        = [production_variants[0].initial_instance_count]
  }
}

resource "aws_sagemaker_endpoint" "this" {
  name                 = var.name
  endpoint_config_name = aws_sagemaker_endpoint_configuration.this.name

  tags = var.tags

  # Otherwise SageMaker creates the log group itself (without retention) and Terraform's create fails.
  depends_on = [aws_cloudwatch_log_group.this]
}

################################################################################
# Autoscaling
################################################################################

resource "aws_appautoscaling_target" "this" {
  count = var.enable_autoscaling ? 1 : 0

  service_namespace  = "sagemaker"
  resource_id        = "endpoint/${aws_sagemaker_endpoint.this.name}/variant/${local.variant_name}"
  scalable_dimension = "sagemaker:variant:DesiredInstanceCount"
  min_capacity       = var.min_instance_count
  max_capacity       = var.max_instance_count

  tags = var.tags
}

resource "aws_appautoscaling_policy" "this" {
  count = var.enable_autoscaling ? 1 : 0

  # A TTS session is one long request: ConcurrentRequestsPerModel counts the open streams (sampled every
  # 10 s), where invocations per minute would see one call per hour-long session. The target is the stream
  # capacity of one instance (capacity.tf).
  name               = "${var.name}-concurrent-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this[0].service_namespace
  resource_id        = aws_appautoscaling_target.this[0].resource_id
  scalable_dimension = aws_appautoscaling_target.this[0].scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = local.autoscaling_target
    scale_in_cooldown  = var.scale_in_cooldown
    scale_out_cooldown = var.scale_out_cooldown

    predefined_metric_specification {
      predefined_metric_type = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    }
  }
}
