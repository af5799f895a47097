// What this binary was built from (src/server/build_info.cc.in, written by CMake at configure
// time): the project's version (CMakeLists.txt) and the git commit of the source tree, "unknown"
// outside a git checkout. The images, built without .git, are given theirs (RANKD_COMMIT, a
// build argument of docker/Dockerfile.*).
#ifndef RANKD_SERVER_BUILD_INFO_H_
#define RANKD_SERVER_BUILD_INFO_H_

namespace rankd::server {

extern const char kVersion[];
extern const char kCommit[];

}  // namespace rankd::server

#endif  // RANKD_SERVER_BUILD_INFO_H_
