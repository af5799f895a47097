# GET /docs: npm's swagger-ui-dist, packed with `npm pack` at configure time into the build tree
# (npm's cache then serves it offline to later build trees), its two files that the page needs
# embedded into rankd_server beside src/server/http/api_docs/index.html (api_docs.h).
#
# RANKD_SWAGGER_UI: AUTO (default) embeds it when npm can get it, else warns and builds without
# (GET /docs then answers 404 saying so); ON fails the configure instead; OFF never asks npm.
# Sets RANKD_SWAGGER_UI_FOUND and writes ${RANKD_DOCS_FILES_CC} (DocsFiles()).
set(RANKD_SWAGGER_UI AUTO CACHE STRING "Embed Swagger UI for GET /docs: AUTO, ON (required), OFF")
set_property(CACHE RANKD_SWAGGER_UI PROPERTY STRINGS AUTO ON OFF)
set(RANKD_SWAGGER_UI_VERSION 5.35.0)

set(_swagger_dir ${CMAKE_BINARY_DIR}/_deps/swagger-ui-dist-${RANKD_SWAGGER_UI_VERSION})
set(_swagger_tgz ${_swagger_dir}/swagger-ui-dist-${RANKD_SWAGGER_UI_VERSION}.tgz)
set(RANKD_SWAGGER_UI_FOUND FALSE)
if(NOT RANKD_SWAGGER_UI STREQUAL "OFF")
  if(NOT EXISTS ${_swagger_tgz})
    find_program(RANKD_NPM npm)
    if(RANKD_NPM)
      file(MAKE_DIRECTORY ${_swagger_dir})
      message(STATUS "swagger-ui-dist: npm pack swagger-ui-dist@${RANKD_SWAGGER_UI_VERSION}")
      execute_process(
        COMMAND ${RANKD_NPM} pack swagger-ui-dist@${RANKD_SWAGGER_UI_VERSION} --prefer-offline
                --pack-destination ${_swagger_dir}
        RESULT_VARIABLE _npm_rc OUTPUT_QUIET ERROR_VARIABLE _npm_err TIMEOUT 300)
      if(NOT _npm_rc EQUAL 0)
        set(_swagger_why "npm pack failed (${_npm_rc}): ${_npm_err}")
        file(REMOVE ${_swagger_tgz})
      endif()
    else()
      set(_swagger_why "npm is not installed")
    endif()
  endif()
  if(EXISTS ${_swagger_tgz})
    file(ARCHIVE_EXTRACT INPUT ${_swagger_tgz} DESTINATION ${_swagger_dir}
         PATTERNS package/swagger-ui-bundle.js package/swagger-ui.css)
    set(RANKD_SWAGGER_UI_FOUND TRUE)
  elseif(RANKD_SWAGGER_UI STREQUAL "ON")
    message(FATAL_ERROR "RANKD_SWAGGER_UI=ON: swagger-ui-dist unavailable: ${_swagger_why}")
  else()
    message(WARNING "swagger-ui-dist unavailable (${_swagger_why}): building without Swagger UI, "
                    "GET /docs will answer 404 (GET /openapi.json is served all the same)")
  endif()
endif()

# DocsFiles(): path, content type (UTF-8 text), file; each file's SHA-256 goes into the generated source so
# that a compiler cache sees a change of the embedded bytes.
set(_docs_files)
if(RANKD_SWAGGER_UI_FOUND)
  set(_docs_files
    "/docs|text/html|${PROJECT_SOURCE_DIR}/src/server/http/api_docs/index.html"
    "/docs/swagger-ui.css|text/css|${_swagger_dir}/package/swagger-ui.css"
    "/docs/swagger-ui-bundle.js|text/javascript|${_swagger_dir}/package/swagger-ui-bundle.js")
endif()
set(RANKD_DOCS_ASM "")
set(RANKD_DOCS_ENTRIES "")
set(RANKD_DOCS_HASHES "swagger-ui-dist: ${RANKD_SWAGGER_UI_FOUND} ${RANKD_SWAGGER_UI_VERSION}")
set(RANKD_DOCS_DEPENDS)
set(_i 0)
foreach(_entry IN LISTS _docs_files)
  string(REPLACE "|" ";" _parts "${_entry}")
  list(GET _parts 0 _path)
  list(GET _parts 1 _type)
  list(GET _parts 2 _file)
  file(SHA256 ${_file} _hash)
  set(_sym rankd_docs_file_${_i})
  string(APPEND RANKD_DOCS_HASHES ", ${_path} ${_hash}")
  string(APPEND RANKD_DOCS_ASM
    "extern \"C\" const char ${_sym}[], ${_sym}_end[];\n"
    "__asm__(\".pushsection .rodata\\n.global ${_sym}\\n.global ${_sym}_end\\n"
    "${_sym}:\\n.incbin \\\"${_file}\\\"\\n${_sym}_end:\\n.popsection\");\n")
  string(APPEND RANKD_DOCS_ENTRIES
    "\n      {\"${_path}\", \"${_type}; charset=utf-8\", {${_sym}, static_cast<std::size_t>(${_sym}_end - ${_sym})}},")
  list(APPEND RANKD_DOCS_DEPENDS ${_file})
  math(EXPR _i "${_i} + 1")
endforeach()
set(RANKD_DOCS_FILES_CC ${CMAKE_BINARY_DIR}/src/server/api_docs_files.cc)
configure_file(${PROJECT_SOURCE_DIR}/src/server/http/api_docs_files.cc.in ${RANKD_DOCS_FILES_CC} @ONLY)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${RANKD_DOCS_DEPENDS})
