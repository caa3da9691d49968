#pragma once

#include <memory>

#include "bindings.h"
#include "insitubatch/engine/source.h"

namespace insitubatch::python {

// The exception a Python chunk transform raised, attached to the error Status it becomes:
// the engine carries it to the consumer unread, and the error translator raises this very
// object (its type and traceback) instead of an InSituError built from the message.
class PythonErrorPayload final : public StatusPayload {
 public:
  explicit PythonErrorPayload(nb::handle exception);  // with the GIL held
  // The last reference may go on an engine thread without the GIL: the object is then
  // released at the next call that holds it.
  ~PythonErrorPayload() override;
  // The exception, handed over once (with the GIL held): the engine keeps the failed
  // status, and a reference kept there would close a cycle the collector cannot see
  // (exception -> traceback -> frames -> the pass -> its status -> exception). Null when
  // already taken: the status's text stands in.
  nb::object Take() const;

 private:
  mutable PyObject* exception_;  // a strong reference, until taken
};

// A chunk transform the engine runs, built (its parameters checked) in C++ by one of the
// bound factories: what crosses from Python is this object, never a dict of fields.
// `kind` and `parameters` only describe it (describe(), tests).
struct NativeTransform {
  std::shared_ptr<const engine::ChunkTransform> transform;
  std::string kind;       // "python", "scale", "cast" or "affine"
  size_t parameters = 0;  // per-element values it carries (a scaler's means; 1 for an affine)
};

// A numpy array viewing a shared buffer (the array keeps the buffer alive).
nb::object SharedToNumpy(std::shared_ptr<Buffer> buffer, const std::vector<uint64_t>& shape, zarr::DataType dtype);

}  // namespace insitubatch::python
