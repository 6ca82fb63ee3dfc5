package gossip

// AnnotationPrefix starts the annotations that name a pod's gossip agent
// (ghostwatch.io/gossip, ghostwatch.io/gossip-port, ...): whoever finds the
// agents among the pods keeps these annotations, and need keep no other.
const AnnotationPrefix = "ghostwatch.io/gossip"
