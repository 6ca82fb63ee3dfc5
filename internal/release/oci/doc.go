// Package oci writes a release's container image, from the very binaries its
// archives hold, as an OCI image layout in one tar file (oci-archive): an
// index of one manifest per platform, each a single layer holding
// /ghostwatch, byte for byte the same for the same binaries.
//
// It builds nothing and pushes nothing: scripts/dist.sh builds the binaries,
// and skopeo or docker load takes the file to a registry or a daemon.
package oci
