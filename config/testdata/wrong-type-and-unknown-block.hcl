# Valid apart from a wrong type and an unknown block, both of which must be
# reported with their position.
s3 {
  access_key = "fixture-access"
  secret_key = "fixture-secret"
}

nomad {
  address = "http://127.0.0.1:4646"
}

backend "nomad" {
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
}

workspace {
  port = "eighty"
}
