output "bucket_name" {
  description = "Name of the weight bucket."
  value       = aws_s3_bucket.this.bucket
}

output "bucket_arn" {
  description = "ARN of the weight bucket."
  value       = aws_s3_bucket.this.arn
}

output "kms_key_arn" {
  description = "KMS key that encrypts the weights (created or passed in)."
  value       = local.kms_key_arn
}

output "weights_prefix" {
  description = "Key prefix of this model version's weights, with a trailing slash (e.g. kokoro-82m/v1.0/)."
  value       = local.weights_prefix
}

output "weights_s3_uri" {
  description = "S3 URI of this model version's weights (e.g. s3://bucket/kokoro-82m/v1.0/); upload the weight files under it."
  value       = "s3://${aws_s3_bucket.this.bucket}/${local.weights_prefix}"
}
