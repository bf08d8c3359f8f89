[[- /*
Templates the jobs share. Every job that moves a home between its volume
and S3 runs the data mover (codehub job archive|restore) through
mover_task, and the batch jobs are mover_job around it. Both are given
(mover . TASK), the job's values and:

  .Task    the task's name, and the batch job's group: "archive",
           "restore" or "stop-archive"
  .Op      the mover's command: "archive" (also for "stop-archive") or
           "restore"
  .OnStop  true for "stop-archive", the workspace job's poststop task
  .ReadOnly true when the task only reads the home (archives)

A prebuild's archive job (.Prebuild) also runs first_start_task, the
workspace job's first start, before its mover: it builds the home the
mover then archives, under a key the mover completes with the commit
built (prebuild_commit_file).

An operator's _helpers.tpl is read after this file: a define there
replaces this one in every job, and a define in a job's own template
replaces it in that job only. Only the batch jobs explain the mover's
settings in comments; the poststop task runs as they do.
*/ -]]

[[ define "mover_job" -]]
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

  group [[ hcl .Task ]] {
    count = 1

    # Runs on the node holding the volume.
    volume "home" {
      type            = "host"
      source          = [[ hcl (required "volume" .VolumeName) ]]
[[- if and .ReadOnly (not .Prebuild) ]]
      read_only       = true
      access_mode     = "single-node-reader-only"
[[- else ]]
      read_only       = false
      access_mode     = "single-node-writer"
[[- end ]]
      attachment_mode = "file-system"
    }
[[- if .Backup ]]

    # A backup keeps the home on its volume and tries again every 15 s
    # until S3 takes it. While it runs, a drain of the node waits for it
    # (Nomad lets a batch allocation finish until the drain's deadline),
    # so a home whose stop archive failed still leaves a drained node.
    # codehub stops it when the user wakes or deletes the workspace, and
    # at coordinator.archive_timeout on a node in service.
    restart {
      attempts = 20
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }
[[- else ]]

    # One run per attempt: the controller retries with a new attempt.
    restart {
      attempts = 0
      mode     = "fail"
    }
[[- end ]]

    reschedule {
      attempts  = 0
      unlimited = false
    }
[[- if .Prebuild ]]

    # The prebuild: clones the template's repository into the empty home
    # and runs its init, as a workspace's first start does, before the
    # archive task saves the home. A failed build fails the job.
    [[ template "first_start_task" . ]]
[[- end ]]

    [[ template "mover_task" . ]]
  }
}
[[- end ]]

[[ define "mover_task" -]]
task [[ hcl .Task ]] {
      driver = [[ hcl (required "driver" .Driver) ]]
[[- if .OnStop ]]

      lifecycle {
        hook = "poststop"
      }
[[- end ]]

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
[[- if .OnStop ]]

      # An upload that fails (S3, or the codehub server serving the
      # artifact, away) is tried again every 15 s until it succeeds: the
      # allocation, and a drain of its node, ends only once the home is in
      # S3. codehub gives it up (SIGUSR1) only on a node in service, once
      # the stop has taken coordinator.stop_timeout.
      restart {
        attempts = 20
        interval = "5m"
        delay    = "15s"
        mode     = "delay"
      }
[[- end ]]
[[- if eq .Driver "docker" ]]
[[ if not .OnStop ]]
      # As the workspace user: restored files must be the workspace's own.
[[- end ]]
      user = "[[ .UID ]]:[[ .GID ]]"
[[ if not .OnStop ]]
      # The job image's entrypoint is codehub.
[[- end ]]
      config {
        image        = [[ hcl (required "job_image" .JobImage) ]]
        force_pull   = false
[[- if .NetworkMode ]]
        network_mode = [[ hcl .NetworkMode ]]
[[- end ]]
        args         = [[ template "mover_args" . ]]
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
[[- end ]]

      config {
        command = [[ if .ArtifactURL ]]"local/codehub"[[ else ]][[ hcl (required "codehub_path" .CodehubPath) ]][[ end ]]
        args    = [[ template "mover_args" . ]]
[[- if eq .Driver "exec" ]]
[[- if not .OnStop ]]
        # exec grants even a non-root task capabilities such as
        # dac_override; its chroot holds hard links to the node's own
        # files, so the program gets none.
[[- end ]]
        cap_drop = ["all"]
[[- end ]]
      }
[[- end ]]
[[- if ne .Driver "raw_exec" ]]

      volume_mount {
        volume      = "home"
        destination = [[ hcl .HomeDir ]]
        read_only   = [[ .ReadOnly ]]
      }
[[- end ]]

      env {
[[- if .OnStop ]]
        ARCHIVE_URL    = [[ hcl (required "stop_archive_url" .StopArchiveURL) ]]
        CODEHUB_RUN_ID = [[ hcl (required "run_id" .RunID) ]]
        S3_ENDPOINT    = [[ hcl (required "s3_endpoint" .S3Endpoint) ]]
        S3_REGION      = [[ hcl .S3Region ]]
        S3_USE_SSL     = "[[ .S3UseSSL ]]"
[[- else ]]
        ARCHIVE_URL = [[ hcl (required "archive_url" .ArchiveURL) ]]
        S3_ENDPOINT = [[ hcl (required "s3_endpoint" .S3Endpoint) ]]
        S3_REGION   = [[ hcl .S3Region ]]
        S3_USE_SSL  = "[[ .S3UseSSL ]]"
[[- end ]]
[[- if and .ArchiveParent (eq .Op "archive") ]]
[[- if .OnStop ]]
        # Only what changed since the archive the run started from is
        # uploaded.
[[- else ]]
        # Only what changed since this archive is uploaded.
[[- end ]]
        CODEHUB_ARCHIVE_PARENT = [[ hcl .ArchiveParent ]]
[[- end ]]
      }
[[- if .OnStop ]]

      # Only this task can read its variable: the credentials, and the run
      # whose stop it archives.
      template {
        destination = "secrets/s3.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ if nomadVarExists [[ hcl (required "stop_variable_path" .StopVariablePath) ]] }}
          {{ with nomadVar [[ hcl .StopVariablePath ]] }}
          S3_ACCESS_KEY={{ .access_key }}
          S3_SECRET_KEY={{ .secret_key }}
          CODEHUB_STOP_ARCHIVE_RUN={{ .run }}
          {{ end }}
          {{ end }}
        EOT
      }

      # Nomad reserves the larger of the program's and this task's needs,
      # so this asks for little CPU (a share, used while nothing else
      # runs); the data mover's buffers need the memory.
      resources {
        cpu    = 100
        memory = 256
      }
[[- else ]]

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
[[- end ]]
    }
[[- end ]]

[[ define "first_start_task" -]]
task [[ if .Prebuild ]]"build"[[ else ]]"first-start"[[ end ]] {
      driver = [[ hcl .Driver ]]

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }
[[- if eq .Driver "docker" ]]

      user = "[[ .UID ]]:[[ .GID ]]"

      config {
        image        = [[ hcl (required "image" .Image) ]]
        force_pull   = false
[[- if .NetworkMode ]]
        network_mode = [[ hcl .NetworkMode ]]
[[- end ]]
        entrypoint   = ["/bin/sh"]
        args         = ["-c", [[ hcl .FirstStartScript ]], "sh"]
      }

      volume_mount {
        volume      = "home"
        destination = [[ hcl .HomeDir ]]
      }
[[- else ]]

      config {
        command = "/bin/sh"
        args    = ["-c", [[ hcl .FirstStartScript ]], "sh"]
[[- if eq .Driver "exec" ]]
        cap_drop = ["all"]
[[- end ]]
      }
[[- if eq .Driver "exec" ]]

      volume_mount {
        volume      = "home"
        destination = [[ hcl .HomeDir ]]
      }
[[- end ]]
[[- end ]]

      env {
        HOME         = [[ hcl .HomeDir ]]
        # exec replaces HOME with the task user's home from the node's
        # user database; the script takes this one.
        CODEHUB_HOME = [[ hcl .HomeDir ]]
        # The file below, removed by the script once its clones are done,
        # before the dotfiles' install script runs.
        CODEHUB_GIT_TOKEN_FILE = "${NOMAD_SECRETS_DIR}/first-start.env"
[[- if .Prebuild ]]
        # A prebuild's: it marks the home prebuilt and names the commit it
        # built where the archive task reads it.
        CODEHUB_PREBUILD       = "1"
        CODEHUB_COMMIT_FILE    = "[[ template "prebuild_commit_file" ]]"
[[- end ]]
[[- if .FirstStartInit ]]
[[- range .Env ]]
        [[ ident .Name ]] = [[ hcl .Value ]]
[[- end ]]
[[- end ]]
      }

      # The repository and dotfiles URLs and the owner's git credential,
      # read at run time from the job's variable: a user's text in an env
      # block would be open to Nomad's interpolation, and the credential
      # is a secret. Only this task has them.
      template {
        destination = "secrets/first-start.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ with nomadVar [[ hcl (required "first_start_variable_path" .FirstStartVariablePath) ]] }}
          {{ .first_start_env }}
          {{ end }}
        EOT
      }

      resources {
[[- if .FirstStartInit ]]
        # Init builds the project: the program's share of the node.
        cpu    = [[ required "cpu" .CPU ]]
        memory = [[ required "memory" .Memory ]]
[[- if .MemoryMax ]]
        memory_max = [[ .MemoryMax ]]
[[- end ]]
[[- else ]]
        cpu    = 100
        memory = 256
[[- end ]]
      }
    }
[[- end ]]

[[- /* Where a prebuild's build task names the commit it built, for the
archive task: the allocation's shared directory, which both see. */ -]]
[[ define "prebuild_commit_file" ]]${NOMAD_ALLOC_DIR}/data/prebuild-commit[[ end ]]

[[- /* The mover's command line: never a secret, which the UI would show. */ -]]
[[ define "mover_args" -]]
["job", [[ hcl .Op ]], [[ if .OnStop ]]"--on-stop", [[ end ]][[ if .Prebuild ]]"--commit-file", "[[ template "prebuild_commit_file" ]]", [[ end ]][[ if .ReadOnly ]]"--src"[[ else ]]"--dst"[[ end ]], [[ hcl (required "home" .HomeDir) ]]]
[[- end ]]
