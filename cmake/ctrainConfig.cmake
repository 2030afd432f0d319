# ctrain's CMake package: find_package(ctrain) defines the imported target ctrain::ctrain, the
# shared library libctrain with its headers:
#     find_package(ctrain REQUIRED)
#     target_link_libraries(app PRIVATE ctrain::ctrain)
include("${CMAKE_CURRENT_LIST_DIR}/ctrainTargets.cmake")
