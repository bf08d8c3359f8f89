s3 {
  access_key = "a"
  secret_key = "b"
}
backend "nomad" {
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"
}
template "nodefault" {
  repository_parameter = "repo"
  parameter "repo" {
  }
  prebuild {
    init  = ["npm ci", " "]
    every = "1m"
    keep  = 11
  }
}
template "badevery" {
  prebuild {
    init  = []
    every = "daily"
  }
}
template "toowarm" {
  warm = 101
  parameter "x" {
  }
}
