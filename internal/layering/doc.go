// Package layering holds only a test: it keeps softroce's imports pointing
// one way (clock, wire → link → verbs → cm → tools → cmd), with dada free
// of RDMA.
package layering
