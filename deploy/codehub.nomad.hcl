# codehub itself as a Nomad service job: `count` replicas of `codehub
# server`. One leads the coordinator (elected through PostgreSQL); every
# replica serves the API, the dashboard and the workspace proxy.
#
# The image is the one `make image` builds (bin/codehub-image-VERSION.tar):
# load it into each client's engine (`docker load -i …`) or push it to your
# registry, and name it in `image`. It also runs the workspaces' archive and
# restore jobs (`job_image`).
#
# Secrets live in the Nomad Variable nomad/jobs/codehub, which only this
# job's tasks can read; write it once before the first run:
#
#   nomad var put nomad/jobs/codehub \
#     database_url='postgres://codehub:…@db.internal:5432/codehub' \
#     redis_url='redis://redis.internal:6379/0' \
#     s3_access_key=… s3_secret_key=… nomad_token=… \
#     admin_password=…
#
# nomad_token is a token for the policy in docs/nomad.md; admin_password
# (optional) creates the first administrator, "admin", at the first start.
# Then:
#
#   nomad job run -var image=registry.internal/codehub:1.0.0 \
#     -var public_url=https://codehub.example.com \
#     -var s3_endpoint=minio.internal:9000 deploy/codehub.nomad.hcl
#
# docs/nomad.md, "Deployment", walks through it; packs/codehub renders the
# same job with nomad-pack.

variable "image" {
  type        = string
  description = "codehub's image (make image), for the server and its archive and restore jobs."
}

variable "count" {
  type        = number
  default     = 2
  description = "Replicas of codehub server; one leads at a time."
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "public_url" {
  type        = string
  description = "The URL users open, in front of every replica (a load balancer or Nomad's service discovery behind one)."
}

variable "listen_host" {
  type        = string
  default     = "0.0.0.0"
  description = "The address the server binds inside its network namespace."
}

variable "network_mode" {
  type        = string
  default     = "bridge"
  description = "The docker network mode of the server; host where the engine has no bridge."
}

variable "nomad_address" {
  type        = string
  default     = "http://{{ env \"attr.unique.network.ip-address\" }}:4646"
  description = "Nomad's HTTP API as the server reaches it: by default the agent of the node it runs on."
}

variable "s3_endpoint" {
  type = string
}

variable "s3_bucket" {
  type    = string
  default = "codehub"
}

variable "s3_use_ssl" {
  type    = bool
  default = true
}

variable "workspace_driver" {
  type        = string
  default     = "docker"
  description = "The task driver of workspaces and their jobs: docker, exec or raw_exec."
}

variable "workspace_network_mode" {
  type        = string
  default     = ""
  description = "The docker network mode of workspaces and their jobs; empty for the engine's default."
}

variable "config" {
  type        = string
  description = "The rest of codehub's configuration file (config/codehub.example.hcl): the workspace block, templates, auth, limits."
  default     = <<-EOT
    workspace {
      image = "codercom/code-server:4.100.3"
    }
  EOT
}

job "codehub" {
  type        = "service"
  datacenters = var.datacenters

  meta = {
    "codehub.io/component" = "control-plane"
  }

  group "server" {
    count = var.count

    # The server listens on the port Nomad picks, in a bridge as on the
    # host's network.
    network {
      port "http" {}
    }

    # One replica at a time, the next only once the new one passes its
    # check; a replica that never does rolls the job back.
    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      healthy_deadline = "3m"
      auto_revert      = true
    }

    service {
      name     = "codehub"
      port     = "http"
      provider = "nomad"

      check {
        type     = "http"
        path     = "/api/v1/health"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "server" {
      driver = "docker"

      config {
        image        = var.image
        force_pull   = false
        network_mode = var.network_mode
        ports        = ["http"]
        args         = ["server", "-config", "/local/codehub.hcl"]
      }

      # Out of service discovery 5 s before it is stopped, so a front
      # reading it sends no new request there; then a leader hands over at
      # once (its lock is released), while workspaces keep running.
      shutdown_delay = "5s"
      kill_timeout   = "30s"

      # Connection strings and keys come from the variable as environment
      # variables; the configuration file holds none.
      template {
        destination = "secrets/codehub.env"
        env         = true
        change_mode = "restart"
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/codehub" }}
          CODEHUB_DATABASE_URL={{ .database_url }}
          CODEHUB_REDIS_URL={{ .redis_url }}
          CODEHUB_S3_ACCESS_KEY={{ .s3_access_key }}
          CODEHUB_S3_SECRET_KEY={{ .s3_secret_key }}
          NOMAD_TOKEN={{ .nomad_token }}
          {{ with .admin_password }}CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD={{ . }}{{ end }}
          {{ end }}
        EOT
      }

      template {
        destination = "local/codehub.hcl"
        change_mode = "restart"
        data        = <<-EOT
          listen     = "${var.listen_host}:{{ env "NOMAD_PORT_http" }}"
          public_url = "${var.public_url}"
          log_json   = true

          s3 {
            endpoint = "${var.s3_endpoint}"
            bucket   = "${var.s3_bucket}"
            use_ssl  = ${var.s3_use_ssl}
          }

          backend "nomad" {
            address      = "${var.nomad_address}"
            namespace    = "{{ env "NOMAD_NAMESPACE" }}"
            driver       = "${var.workspace_driver}"
            job_image    = "${var.image}"
            network_mode = "${var.workspace_network_mode}"
          }

          ${var.config}
        EOT
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
