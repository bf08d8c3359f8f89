s3 {
  access_key = "a"
  secret_key = "b"
}
backend "nomad" {
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
}
template "big" {
  memory     = 4
  memory_max = 2
  env = {
    HOME = "/root"
  }
  standby_ttl = "100h"
  groups      = [""]
  parameter "n" {
    type    = "number"
    default = 40
    max     = 10
  }
  parameter "s" {
    regex = "("
  }
  repository_parameter = "n"
}
template "big" {
}
