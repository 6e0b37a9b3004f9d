locals {
  variant_name = "AllTraffic"

  container = {
    image = var.image_uri
    environment = merge(
      { KOKORO_BACKEND = "torch" },
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
  }

  tags = var.tags

  # The endpoint switches to the new configuration before the old one goes.
  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_sagemaker_endpoint" "this" {
  name                 = var.name
  endpoint_config_name = aws_sagemaker_endpoint_configuration.this.name

  tags = var.tags
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

  name               = "${var.name}-invocations-per-instance"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this[0].service_namespace
  resource_id        = aws_appautoscaling_target.this[0].resource_id
  scalable_dimension = aws_appautoscaling_target.this[0].scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value       = var.target_invocations_per_instance
    scale_in_cooldown  = var.scale_in_cooldown
    scale_out_cooldown = var.scale_out_cooldown

    predefined_metric_specification {
      predefined_metric_type = "SageMakerVariantInvocationsPerInstance"
    }
  }
}
