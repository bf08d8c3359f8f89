s3 {
  access_key = "a"
  secret_key = "b"
}

backend "nomad" {
  driver   = "raw_exec"
  job_image = ""
}

workspace {
  command = "/usr/bin/code-server"
}

template "go" {
  description = "Go service"
  cpu         = 2000
  memory      = 4096
  memory_max  = 8192
  env = {
    GOFLAGS = "-mod=mod"
  }
  standby_ttl          = "1h"
  groups               = ["admins"]
  repository_parameter = "repo"

  parameter "repo" {
    description = "Repository to clone"
    default     = "https://example.com/a.git"
    regex       = "(https|file)://.+"
  }
  parameter "workers" {
    type    = "number"
    default = 4
    min     = 1
    max     = 16
  }
  parameter "debug" {
    type    = "bool"
    default = false
  }
  parameter "editor" {
    options = ["vim", "emacs"]
  }
}
