// The worker process: `kevolve worker --device N`. Holds one CUDA context, speaks the
// protocol on stdin/stdout, and never writes anything else to stdout.
#pragma once

namespace kevolve {

// Serves requests until "shutdown" or the coordinator closes the pipe. Returns the exit
// status. After a fault that breaks the context it sends the result, then kills itself.
int RunWorker(int device);

}  // namespace kevolve
