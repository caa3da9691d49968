// Status -> Python exception translation. The classes live in insitubatch/errors.py so
// users can import and catch them without touching the extension.

#include <string>

#include "bind_transforms.h"
#include "bindings.h"

namespace insitubatch::python {
namespace {

const char* ClassNameFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case StatusCode::kNotFound:
      return "NotFoundError";
    case StatusCode::kIoError:
      return "StoreError";
    case StatusCode::kDataLoss:
      return "CorruptChunkError";
    case StatusCode::kResourceExhausted:
      return "ResourceExhaustedError";
    case StatusCode::kCancelled:
      return "CancelledError";
    case StatusCode::kUnimplemented:
      return "UnsupportedError";
    case StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case StatusCode::kLocked:
      return "CacheLockedError";
    case StatusCode::kOk:
    default:
      break;
  }
  return "InSituError";
}

}  // namespace

void BindErrors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusException& e) {
      // A Python chunk transform's exception: raised again as itself, its traceback kept.
      if (const auto* raised = dynamic_cast<const PythonErrorPayload*>(e.status.payload().get())) {
        if (nb::object exc = raised->Take(); exc.is_valid()) {
          PyObject* traceback = PyException_GetTraceback(exc.ptr());  // a new reference, or null
          PyObject* type = exc.type().inc_ref().ptr();
          PyErr_Restore(type, exc.release().ptr(), traceback);  // steals all three
          return;
        }
      }
      nb::object errors = nb::module_::import_("insitubatch.errors");
      nb::object cls = errors.attr(ClassNameFor(e.status.code()));
      // A message may quote untrusted bytes (a key, a document); never let one that is
      // not UTF-8 turn the error into nanobind's bare conversion RuntimeError.
      const std::string& message = e.status.message();
      nb::object text =
          nb::steal(PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace"));
      if (!text.is_valid()) {
        PyErr_Clear();
        text = nb::str("(an error message that could not be decoded)");
      }
      nb::object exc = cls(text);
      if (e.status.detail() != 0) {
        nb::setattr(exc, "detail", nb::int_(e.status.detail()));
      }
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });
}

}  // namespace insitubatch::python
