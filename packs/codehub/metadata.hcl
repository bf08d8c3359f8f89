app {
  url = "https://github.com/codehub-io/codehub"
}

pack {
  name        = "codehub"
  description = "CodeHub's control plane: replicas of codehub server, one leading, serving cloud development workspaces that run as Nomad jobs."
  version     = "0.1.0"
}
