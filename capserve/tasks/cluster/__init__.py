"""Cluster bring-up tasks: converge AWS resources (network, IAM, EKS, HyperPod) by campaign tag/name."""
