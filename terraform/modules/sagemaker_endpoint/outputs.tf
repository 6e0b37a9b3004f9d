output "endpoint_name" {
  description = "Name of the endpoint."
  value       = aws_sagemaker_endpoint.this.name
}

output "endpoint_arn" {
  description = "ARN of the endpoint."
  value       = aws_sagemaker_endpoint.this.arn
}

output "endpoint_config_name" {
  description = "Name of the endpoint configuration in use."
  value       = aws_sagemaker_endpoint_configuration.this.name
}

output "model_name" {
  description = "Name of the SageMaker model in use."
  value       = aws_sagemaker_model.this.name
}

output "variant_name" {
  description = "Name of the production variant."
  value       = local.variant_name
}

output "image_uri" {
  description = "Image the model runs."
  value       = aws_sagemaker_model.this.primary_container[0].image
}

output "instance_type" {
  description = "Instance type of the production variant."
  value       = aws_sagemaker_endpoint_configuration.this.production_variants[0].instance_type
}

output "inference_ami_version" {
  description = "InferenceAmiVersion of the variant (null on CPU instance types)."
  value       = aws_sagemaker_endpoint_configuration.this.production_variants[0].inference_ami_version
}

output "log_group_name" {
  description = "CloudWatch log group of the endpoint's containers."
  value       = aws_cloudwatch_log_group.this.name
}

output "autoscaling_metric" {
  description = "Predefined metric the target-tracking policy follows (null without autoscaling)."
  value       = one(aws_appautoscaling_policy.this[*].target_tracking_scaling_policy_configuration[0].predefined_metric_specification[0].predefined_metric_type)
}

output "autoscaling_target" {
  description = "Target value of the target-tracking policy: concurrent requests (open TTS sessions) per instance (null without autoscaling)."
  value       = one(aws_appautoscaling_policy.this[*].target_tracking_scaling_policy_configuration[0].target_value)
}

output "autoscaling_target_source" {
  description = "Where the target comes from: \"derived: ...\" (the measured CPU generation), \"extrapolated: ...\" (another CPU), \"estimate: ...\" (a GPU type, not measured) or \"override: ...\", with the figures (null without autoscaling)."
  value       = var.enable_autoscaling ? local.autoscaling_target_source : null
}

output "model_data_source" {
  description = "Where the weights come from: s3_uri, s3_data_type and compression_type."
  value = {
    s3_uri           = aws_sagemaker_model.this.primary_container[0].model_data_source[0].s3_data_source[0].s3_uri
    s3_data_type     = aws_sagemaker_model.this.primary_container[0].model_data_source[0].s3_data_source[0].s3_data_type
    compression_type = aws_sagemaker_model.this.primary_container[0].model_data_source[0].s3_data_source[0].compression_type
  }
}

output "autoscaling_resource_id" {
  description = "Application Auto Scaling resource id of the variant (null without autoscaling)."
  value       = one(aws_appautoscaling_target.this[*].resource_id)
}

output "autoscaling_policy_arn" {
  description = "ARN of the target-tracking policy (null without autoscaling)."
  value       = one(aws_appautoscaling_policy.this[*].arn)
}
