# Generates the cudaError_t name table from the toolkit's driver_types.h, so
# the names always match the headers the library is built against.
# Inputs: HEADER, OUTPUT.
file(READ "${HEADER}" text)
string(FIND "${text}" "enum __device_builtin__ cudaError" start)
if(start EQUAL -1)
  message(FATAL_ERROR "enum cudaError not found in ${HEADER}")
endif()
string(SUBSTRING "${text}" ${start} -1 text)
string(FIND "${text}" "};" stop)
string(SUBSTRING "${text}" 0 ${stop} text)
string(REGEX MATCHALL "cuda[A-Za-z0-9_]+[ \t]*=[ \t]*[0-9]+" entries "${text}")
set(out "/* generated from ${HEADER} by gen_error_names.cmake */\n")
foreach(e IN LISTS entries)
  string(REGEX REPLACE "^(cuda[A-Za-z0-9_]+)[ \t]*=[ \t]*([0-9]+)$" "FLYT_ERR(\\1, \\2)\n" line "${e}")
  string(APPEND out "${line}")
endforeach()
file(WRITE "${OUTPUT}" "${out}")
