# The least a working file needs: the S3 credentials (no default) and the
# image holding codehub for archive jobs under the default docker driver.
s3 {
  access_key = "minimal-access"
  secret_key = "minimal-secret"
}

backend "nomad" {
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
}
