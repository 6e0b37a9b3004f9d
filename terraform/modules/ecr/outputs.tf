output "repository_urls" {
  description = "Repository URL (registry/name, without tag or digest) per key."
  value       = { for key, repo in aws_ecr_repository.this : key => repo.repository_url }
}

output "repository_arns" {
  description = "Repository ARN per key."
  value       = { for key, repo in aws_ecr_repository.this : key => repo.arn }
}

output "repository_names" {
  description = "Repository name per key."
  value       = { for key, repo in aws_ecr_repository.this : key => repo.name }
}
