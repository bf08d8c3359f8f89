# Decodes cleanly but breaks validation rules; each problem must point here.
log_level = "loud"

s3 {
  access_key = "a"
  secret_key = "b"
  bucket     = "Not_A_Bucket"
}

backend "nomad" {
  driver = "podman"
}

workspace {
  standby_ttl = "ten minutes"
}

limits {
  max_running_per_user = 5
  max_running_global   = 3
}
