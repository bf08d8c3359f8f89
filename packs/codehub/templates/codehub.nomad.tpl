[[- /*
The job deploy/codehub.nomad.hcl runs, as a pack: the same variables
(variables.hcl) and the same job for the same values, which a test checks
by rendering both. The configuration's rest (config) goes in as an HCL
string, as the job file interpolates it, so the heredoc's indentation
rules never touch its lines.
*/ -]]
job "codehub" {
  type        = "service"
  datacenters = [[ var "datacenters" . | toJson ]]

  meta = {
    "codehub.io/component" = "control-plane"
  }

  group "server" {
    count = [[ var "count" . ]]

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
        image        = [[ var "image" . | quote ]]
        force_pull   = false
        network_mode = [[ var "network_mode" . | quote ]]
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
          listen     = "[[ var "listen_host" . ]]:{{ env "NOMAD_PORT_http" }}"
          public_url = "[[ var "public_url" . ]]"
          log_json   = true

          s3 {
            endpoint = "[[ var "s3_endpoint" . ]]"
            bucket   = "[[ var "s3_bucket" . ]]"
            use_ssl  = [[ var "s3_use_ssl" . ]]
          }

          backend "nomad" {
            address      = "[[ var "nomad_address" . ]]"
            namespace    = "{{ env "NOMAD_NAMESPACE" }}"
            driver       = "[[ var "workspace_driver" . ]]"
            job_image    = "[[ var "image" . ]]"
            network_mode = "[[ var "workspace_network_mode" . ]]"
          }

          ${[[ var "config" . | toJson ]]}
        EOT
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
