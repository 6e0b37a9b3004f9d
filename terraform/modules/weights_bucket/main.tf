locals {
  create_kms_key = var.kms_key_arn == null
  kms_key_arn    = local.create_kms_key ? aws_kms_key.this[0].arn : var.kms_key_arn
  # One prefix per model version: a new version is uploaded beside the old one, then the endpoint switches.
  weights_prefix = "${var.model_name}/${var.model_version}/"
}

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

resource "aws_kms_key" "this" {
  count = local.create_kms_key ? 1 : 0

  description             = "SSE-KMS for the ${var.model_name} weight bucket"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_key_deletion_window_days
  # The default key policy: the account's IAM policies decide who may use the key.
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountIAMPolicies"
      Effect    = "Allow"
      Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })

  tags = var.tags
}

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Access logs need a separate log bucket; CloudTrail data events are the audit trail for this bucket.
  #checkov:skip=CKV_AWS_144:Weights are published upstream and can be re-uploaded; cross-region replication is not worth its cost here.
  #checkov:skip=CKV2_AWS_62:Nothing reacts to uploads; the deployment is switched explicitly to a new prefix.
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? var.bucket_name_prefix : null
  force_destroy = var.force_destroy

  tags = var.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  # Disables ACLs: access is decided by IAM and the bucket policy alone.
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = local.kms_key_arn
    }
    # Bucket keys cut KMS requests (and cost) when SageMaker reads many weight files.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "expire-superseded-versions"
    status = "Enabled"

    filter {}

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  # The agent's conversation turns, when it keeps them here (docs/agent.md): an AgentCore session lasts at most
  # eight hours, so a day later nothing reads them again.
  rule {
    id     = "expire-session-turns"
    status = "Enabled"

    filter {
      prefix = "sessions/"
    }

    expiration {
      days = var.session_expiration_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 1
    }
  }

  # A lifecycle rule on a bucket whose versioning is still being enabled can be rejected.
  depends_on = [aws_s3_bucket_versioning.this]
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "DenyInsecureTransport"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })

  # S3 rejects a policy while the public access block is being written.
  depends_on = [aws_s3_bucket_public_access_block.this]
}
