# Archives the home volume of workspace [[ .WorkspaceID ]] to S3.
# Credentials are not here: the template block reads them from a Nomad
# Variable at run time, through the task's workload identity.
job [[ hcl .JobID ]] {
  type        = "batch"
  namespace   = [[ hcl (required "namespace" .Namespace) ]]
[[- if .Region ]]
  region      = [[ hcl .Region ]]
[[- end ]]
  datacenters = [[ hclList (required "datacenters" .Datacenters) ]]
  node_pool   = [[ hcl (required "node_pool" .NodePool) ]]

  # The attempt makes every retry a new job version, which Nomad reruns.
  meta = {
    "codehub.io/workspace-id" = [[ hcl (required "workspace_id" .WorkspaceID) ]]
    "codehub.io/managed"      = "true"
    "codehub.io/op-id"        = [[ hcl (required "op_id" .OpID) ]]
    "codehub.io/archive-key"  = [[ hcl (required "archive_key" .ArchiveKey) ]]
    "codehub.io/attempt"      = "[[ .Attempt ]]"
  }

  group "archive" {
    count = 1

    # Runs on the node holding the volume.
    volume "home" {
      type            = "host"
      source          = [[ hcl (required "volume" .VolumeName) ]]
      read_only       = true
      access_mode     = "single-node-reader-only"
      attachment_mode = "file-system"
    }

    # One run per attempt: the controller retries with a new attempt.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "archive" {
      driver = [[ hcl (required "driver" .Driver) ]]

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
[[- if eq .Driver "docker" ]]

      # As the workspace user: restored files must be the workspace's own.
      user = "[[ .UID ]]:[[ .GID ]]"

      # The job image's entrypoint is codehub.
      config {
        image        = [[ hcl (required "job_image" .JobImage) ]]
        force_pull   = false
[[- if .NetworkMode ]]
        network_mode = [[ hcl .NetworkMode ]]
[[- end ]]
        args         = ["job", "archive", "--src", [[ hcl (required "home" .HomeDir) ]]]
      }
[[- else ]]
[[- if .ArtifactURL ]]

      artifact {
        source      = [[ hcl .ArtifactURL ]]
        destination = "local/codehub"
        mode        = "file"

        options {
          checksum = [[ hcl (required "artifact_checksum" .ArtifactChecksum) ]]
        }
      }

      config {
        command = "local/codehub"
        args    = ["job", "archive", "--src", [[ hcl (required "home" .HomeDir) ]]]
[[- if eq .Driver "exec" ]]
        # exec grants even a non-root task capabilities such as
        # dac_override; its chroot holds hard links to the node's own
        # files, so the program gets none.
        cap_drop = ["all"]
[[- end ]]
      }
[[- else ]]

      config {
        command = [[ hcl (required "codehub_path" .CodehubPath) ]]
        args    = ["job", "archive", "--src", [[ hcl (required "home" .HomeDir) ]]]
[[- if eq .Driver "exec" ]]
        # exec grants even a non-root task capabilities such as
        # dac_override; its chroot holds hard links to the node's own
        # files, so the program gets none.
        cap_drop = ["all"]
[[- end ]]
      }
[[- end ]]
[[- end ]]
[[- if ne .Driver "raw_exec" ]]

      volume_mount {
        volume      = "home"
        destination = [[ hcl .HomeDir ]]
        read_only   = true
      }
[[- end ]]

      env {
        ARCHIVE_URL = [[ hcl (required "archive_url" .ArchiveURL) ]]
        S3_ENDPOINT = [[ hcl (required "s3_endpoint" .S3Endpoint) ]]
        S3_REGION   = [[ hcl .S3Region ]]
        S3_USE_SSL  = "[[ .S3UseSSL ]]"
[[- if .ArchiveParent ]]
        # Only what changed since this archive is uploaded.
        CODEHUB_ARCHIVE_PARENT = [[ hcl .ArchiveParent ]]
[[- end ]]
      }

      template {
        destination = "secrets/s3.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ with nomadVar [[ hcl (required "variable_path" .VariablePath) ]] }}
          S3_ACCESS_KEY={{ .access_key }}
          S3_SECRET_KEY={{ .secret_key }}
          {{ end }}
        EOT
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
