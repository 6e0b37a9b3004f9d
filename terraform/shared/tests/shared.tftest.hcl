# Plans and applies the shared root against a mocked AWS provider: no credentials, no network.

mock_provider "aws" {
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000" }
  }
}

variables {
  weights_bucket_name = "kokoro-weights-test"
}

run "plan_root" {
  command = plan

  assert {
    condition     = output.weights_prefix == "kokoro-82m/v1.0/"
    error_message = "The weights live under <model>/<version>/."
  }
}

run "apply_root" {
  assert {
    condition     = output.weights_s3_uri == "s3://kokoro-weights-test/kokoro-82m/v1.0/"
    error_message = "weights_s3_uri must be the versioned prefix of the weight bucket."
  }

  assert {
    condition     = output.weights_kms_key_arn == "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    error_message = "The bucket must be encrypted with the key the module created."
  }

  assert {
    condition     = length(module.ecr.repository_names) == 2 && module.ecr.repository_names["tts"] == "kokoro-tts/tts" && module.ecr.repository_names["agent"] == "kokoro-tts/agent"
    error_message = "One repository for the TTS image and one for the agent image."
  }
}

run "weights_bucket_is_private_and_encrypted" {
  module {
    source = "../modules/weights_bucket"
  }

  variables {
    bucket_name   = "kokoro-weights-test"
    model_version = "v2.1"
  }

  assert {
    condition = alltrue([
      aws_s3_bucket_public_access_block.this.block_public_acls,
      aws_s3_bucket_public_access_block.this.block_public_policy,
      aws_s3_bucket_public_access_block.this.ignore_public_acls,
      aws_s3_bucket_public_access_block.this.restrict_public_buckets,
    ])
    error_message = "All four public access block settings must be true."
  }

  assert {
    condition = anytrue([
      for rule in aws_s3_bucket_server_side_encryption_configuration.this.rule :
      anytrue([for d in rule.apply_server_side_encryption_by_default : d.sse_algorithm == "aws:kms" && d.kms_master_key_id == aws_kms_key.this[0].arn])
    ])
    error_message = "Default encryption must be SSE-KMS with the bucket's key."
  }

  assert {
    condition     = aws_kms_key.this[0].enable_key_rotation
    error_message = "The bucket key must rotate."
  }

  assert {
    condition     = aws_s3_bucket_versioning.this.versioning_configuration[0].status == "Enabled"
    error_message = "The bucket must be versioned."
  }

  assert {
    condition     = !aws_s3_bucket.this.force_destroy
    error_message = "force_destroy must default to false."
  }

  assert {
    condition = anytrue([
      for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement :
      s.Effect == "Deny" && s.Action == "s3:*" && s.Principal == "*" && s.Condition.Bool["aws:SecureTransport"] == "false"
    ])
    error_message = "The bucket policy must deny every request that is not over TLS."
  }

  assert {
    condition     = output.weights_s3_uri == "s3://kokoro-weights-test/kokoro-82m/v2.1/"
    error_message = "Each model version gets its own prefix."
  }
}

run "ecr_repositories_are_immutable_and_scanned" {
  module {
    source = "../modules/ecr"
  }

  variables {
    repositories     = { tts = "kokoro-tts/tts", agent = "kokoro-tts/agent" }
    keep_last_images = 5
  }

  assert {
    condition     = alltrue([for repo in aws_ecr_repository.this : repo.image_tag_mutability == "IMMUTABLE" && repo.image_scanning_configuration[0].scan_on_push])
    error_message = "Every repository needs immutable tags and scan on push."
  }

  assert {
    condition     = alltrue([for repo in aws_ecr_repository.this : !repo.force_delete])
    error_message = "force_delete must default to false."
  }

  assert {
    condition = alltrue([
      for policy in aws_ecr_lifecycle_policy.this :
      jsondecode(policy.policy).rules[1].selection.countNumber == 5 && jsondecode(policy.policy).rules[0].selection.tagStatus == "untagged"
    ])
    error_message = "The lifecycle policy must expire untagged images and keep the last N."
  }
}

run "rejects_a_model_version_that_is_not_one_path_segment" {
  command = plan

  module {
    source = "../modules/weights_bucket"
  }

  variables {
    bucket_name   = "kokoro-weights-test"
    model_version = "v1/../.."
  }

  expect_failures = [var.model_version]
}
