# Workspace [[ .WorkspaceID ]]: one code-server (or configured program) on
# the node that holds its home volume. Rendered by codehub; edit the
# template, not the job.
job [[ hcl .JobID ]] {
  type        = "service"
  namespace   = [[ hcl (required "namespace" .Namespace) ]]
[[- if .Region ]]
  region      = [[ hcl .Region ]]
[[- end ]]
  datacenters = [[ hclList (required "datacenters" .Datacenters) ]]
  node_pool   = [[ hcl (required "node_pool" .NodePool) ]]

  meta = {
    "codehub.io/workspace-id" = [[ hcl (required "workspace_id" .WorkspaceID) ]]
    "codehub.io/owner-id"     = [[ hcl .OwnerID ]]
    "codehub.io/run-id"       = [[ hcl .RunID ]]
    "codehub.io/managed"      = "true"
  }

  group "workspace" {
    count = 1

    # Pins the group to the node holding the home volume.
    volume "home" {
      type            = "host"
      source          = [[ hcl (required "volume" .VolumeName) ]]
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }

    network {
[[- if and (eq .Driver "docker") .Port ]]
      port "http" {
        to = [[ .Port ]]
      }
[[- else ]]
      port "http" {}
[[- end ]]
[[- if .AgentVariablePath ]]
      # The workspace agent (codehub agent): SSH and the workspace's own
      # ports, for the codehub server only.
[[- if and (eq .Driver "docker") .Port ]]
      port "agent" {
        to = [[ agentContainerPort ]]
      }
[[- else ]]
      port "agent" {}
[[- end ]]
[[- end ]]
    }

    # Allocation deployment health is codehub's bulk readiness signal.
    update {
      health_check      = "checks"
      min_healthy_time  = "0s"
      healthy_deadline  = "5m"
      progress_deadline = "10m"
      auto_revert       = false
    }

    # A crashing workspace fails instead of looping: the controller reports
    # it and decides about retries.
    restart {
      attempts = 1
      interval = "5m"
      delay    = "2s"
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    service {
      name     = [[ hcl (required "service" .Service) ]]
      port     = "http"
      provider = [[ hcl (required "provider" .Provider) ]]
      tags     = ["codehub"]

      check {
        name     = "healthz"
        type     = "http"
        path     = "/healthz"
        interval = [[ hcl (required "check_interval" .CheckInterval) ]]
        timeout  = "1s"
      }
    }

[[- if .FirstStartScript ]]

    # Clones the repository and dotfiles into an empty home (the first
    # start) before the program starts; a failed clone fails the start.
    [[ template "first_start_task" . ]]
[[- end ]]

    task "workspace" {
      driver = [[ hcl (required "driver" .Driver) ]]

      # Data lives on the volume: stop kills at once.
      kill_signal  = "SIGKILL"
      kill_timeout = "1s"
[[- if eq .Driver "docker" ]]

      user = "[[ .UID ]]:[[ .GID ]]"
[[- if .AgentVariablePath ]]

      # codehub for the agent, in the task directory docker mounts at
      # /local: the image need not contain it. A tar archive, whose file
      # mode (executable) survives the download.
      artifact {
        source      = [[ hcl (required "artifact_url" .ArtifactURL) ]]
        destination = "local/codehub-agent"

        options {
          checksum = [[ hcl (required "artifact_checksum" .ArtifactChecksum) ]]
        }
      }
[[- end ]]

      config {
        image        = [[ hcl (required "image" .Image) ]]
        force_pull   = false
        ports        = ["http"[[ if .AgentVariablePath ]], "agent"[[ end ]]]
[[- if .NetworkMode ]]
        network_mode = [[ hcl .NetworkMode ]]
[[- end ]]
[[- if .AgentVariablePath ]]
        # codehub agent starts the entrypoint and serves the server beside
        # it, as the program's user, in its container.
        entrypoint   = [[ agentEntrypoint .Port .Entrypoint ]]
[[- else if .Entrypoint ]]
        entrypoint   = [[ hclList .Entrypoint ]]
[[- end ]]
[[- if .Args ]]
        args         = [[ argv .Args .HomeDir ]]
[[- end ]]
      }

      volume_mount {
        volume      = "home"
        destination = [[ hcl .HomeDir ]]
      }
[[- else ]]
[[- if and .AgentVariablePath .ArtifactURL ]]

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
[[- if .AgentVariablePath ]]
        # codehub agent starts the program and serves the server beside it,
        # as the program's user, in its namespaces.
        command = [[ if .ArtifactURL ]]"local/codehub"[[ else ]][[ hcl (required "codehub_path" .CodehubPath) ]][[ end ]]
        args    = [[ agentArgv (hcl .HomeDir) (hcl (required "command" .Command)) (argv .Args .HomeDir) ]]
[[- else ]]
        command = [[ hcl (required "command" .Command) ]]
        args    = [[ argv .Args .HomeDir ]]
[[- end ]]
[[- if eq .Driver "exec" ]]
        # exec grants even a non-root task capabilities such as
        # dac_override; its chroot holds hard links to the node's own
        # files, so the program gets none.
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
        HOME = [[ hcl (required "home" .HomeDir) ]]
        PORT = "${NOMAD_PORT_http}"
[[- range .Env ]]
        [[ ident .Name ]] = [[ hcl .Value ]]
[[- end ]]
      }
[[- if .UserEnvVariablePath ]]

      # What the user chose (the template's parameters), read at run time
      # from the job's variable: Nomad would interpolate "${...}" in the
      # user's text were it in the env block, but leaves a rendered file
      # as it is.
      template {
        destination = "secrets/user.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ with nomadVar [[ hcl .UserEnvVariablePath ]] }}
          {{ .user_env }}
          {{ end }}
        EOT
      }
[[- end ]]
[[- if .AgentVariablePath ]]

      # The agent's token and SSH host key, which it reads and removes from
      # its environment before it starts the program.
      template {
        destination = "secrets/agent.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ with nomadVar [[ hcl .AgentVariablePath ]] }}
          CODEHUB_AGENT_TOKEN={{ .agent_token }}
          CODEHUB_AGENT_HOST_KEY={{ .agent_host_key }}
          {{ end }}
        EOT
      }
[[- end ]]
[[- if .TokenVariablePath ]]

      # The secret the program demands of every request but /healthz. It is
      # read at run time through the task's workload identity, so the job's
      # source never holds it.
      template {
        destination = "secrets/upstream.env"
        env         = true
        change_mode = "noop"
        data        = <<-EOT
          {{ with nomadVar [[ hcl .TokenVariablePath ]] }}
          HASHED_PASSWORD={{ .token }}
          {{ end }}
        EOT
      }
[[- end ]]

      resources {
        cpu    = [[ required "cpu" .CPU ]]
        memory = [[ required "memory" .Memory ]]
[[- if .MemoryMax ]]
        memory_max = [[ .MemoryMax ]]
[[- end ]]
      }
    }
[[- if .StopArchiveURL ]]

    # Archives the home once the program has stopped, whoever stopped it
    # (codehub, a crash, a node drain), so a stopped home is in S3: nothing
    # else can run on a drained node to save it. codehub removes the
    # variable before it stops a workspace it is deleting, and the task
    # then archives nothing; it runs as the archive job does.
    [[ template "mover_task" (mover . "stop-archive") ]]
[[- end ]]
  }
}
