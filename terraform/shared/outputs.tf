output "region" {
  description = "Region of the shared resources."
  value       = var.region
}

output "tts_repository_url" {
  description = "ECR repository URL of the TTS image (push here, then pass <url>@<digest> as tts_image_uri)."
  value       = module.ecr.repository_urls["tts"]
}

output "agent_repository_url" {
  description = "ECR repository URL of the agent image (push here, then pass <url>@<digest> as agent_image_uri)."
  value       = module.ecr.repository_urls["agent"]
}

output "weights_bucket_name" {
  description = "Weight bucket name (the deployment's weights_bucket_name)."
  value       = module.weights_bucket.bucket_name
}

output "weights_prefix" {
  description = "Key prefix of the weight version (the deployment's weights_prefix)."
  value       = module.weights_bucket.weights_prefix
}

output "weights_s3_uri" {
  description = "Where to upload the weight files (s3://bucket/kokoro-82m/v1.0/)."
  value       = module.weights_bucket.weights_s3_uri
}

output "weights_kms_key_arn" {
  description = "KMS key of the weight bucket (the deployment's weights_kms_key_arn)."
  value       = module.weights_bucket.kms_key_arn
}
