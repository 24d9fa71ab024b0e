"""A real Kubernetes control plane on loopback for integration tests and the peer benchmark.

`build.sh` builds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok through
the Go module proxy into a per-version cache folder outside the repository; `cluster.Testbed`
starts them (TLS, token auth, RBAC) and registers fake GPU nodes. See docs/testbed.md.
"""
