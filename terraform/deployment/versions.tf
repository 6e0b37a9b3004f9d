terraform {
  required_version = ">= 1.9"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }

  # Local state by default; for a team, add a backend (e.g. backend "s3") in a backend.tf of your own.
}

provider "aws" {
  region = var.region

  default_tags {
    tags = var.tags
  }
}
