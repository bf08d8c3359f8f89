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
