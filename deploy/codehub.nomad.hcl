# codehub itself as a Nomad service job: two replicas of `codehub server`
# (one leads the coordinator, both serve the API and proxy).
#
# Secrets live in the Nomad Variable nomad/jobs/codehub, written once by an
# operator:
#
#   nomad var put nomad/jobs/codehub \
#     database_url='postgres://codehub:…@db.internal:5432/codehub' \
#     redis_url='redis://redis.internal:6379/0' \
#     s3_access_key=… s3_secret_key=… nomad_token=…
#
# nomad_token is a token for the policy in docs/nomad.md.
job "codehub" {
  type        = "service"
  datacenters = ["*"]

  meta = {
    "codehub.io/component" = "control-plane"
  }

  group "server" {
    count = 2

    network {
      port "http" {
        to = 8080
      }
    }

    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "10s"
      auto_revert      = true
    }

    service {
      name     = "codehub"
      port     = "http"
      provider = "nomad"

      check {
        type     = "http"
        path     = "/healthz"
        interval = "5s"
        timeout  = "2s"
      }
    }

    task "server" {
      driver = "docker"

      config {
        image = "ghcr.io/codehub-io/codehub:1.0.0"
        ports = ["http"]
        args  = ["server", "-config", "/local/codehub.hcl"]
      }

      # Connection strings and keys come from the variable as environment
      # variables; the config file itself holds none.
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
          {{ end }}
        EOT
      }

      template {
        destination = "local/codehub.hcl"
        change_mode = "restart"
        data        = <<-EOT
          listen     = "0.0.0.0:8080"
          public_url = "https://codehub.example.com"
          log_json   = true

          s3 {
            endpoint = "minio.internal:9000"
            bucket   = "codehub"
            use_ssl  = true
          }

          backend "nomad" {
            address   = "http://{{ env "attr.unique.network.ip-address" }}:4646"
            namespace = "default"
            node_pool = "default"
            driver    = "docker"
            job_image = "ghcr.io/codehub-io/codehub:1.0.0"
          }

          workspace {
            image = "codercom/code-server:4.100.3"
          }
        EOT
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
