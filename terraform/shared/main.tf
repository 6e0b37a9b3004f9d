# Long-lived resources: images and weights survive every destroy of the deployment root.

module "ecr" {
  source = "../modules/ecr"

  repositories = {
    tts   = "${var.name}/tts"
    agent = "${var.name}/agent"
  }
  keep_last_images = var.keep_last_images
  force_delete     = var.force_destroy
}

module "weights_bucket" {
  source = "../modules/weights_bucket"

  bucket_name        = var.weights_bucket_name
  bucket_name_prefix = "${var.name}-weights-"
  model_name         = var.model_name
  model_version      = var.model_version
  force_destroy      = var.force_destroy
}
