# Runs a command and passes only when both its exit code and its output are as expected. CTest's
# PASS_REGULAR_EXPRESSION alone ignores the exit code, so a run that prints the right line and
# then fails (a LeakSanitizer report at exit) would pass.
#
#   cmake -DEXPECT_OUTPUT=<regex> [-DEXPECT_EXIT=<code>] -P expect.cmake -- <command> [<arg>...]
#
# EXPECT_OUTPUT is a CMake regular expression (as CTest's) searched in stdout and stderr
# together; EXPECT_EXIT defaults to 0. The command's output is passed through as it comes.
cmake_minimum_required(VERSION 3.20)
if(NOT DEFINED EXPECT_EXIT)
    set(EXPECT_EXIT 0)
endif()
set(command)
set(after_dashes FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
    if(after_dashes)
        string(REPLACE ";" "\\;" arg "${CMAKE_ARGV${i}}") # one argument, not a list
        list(APPEND command "${arg}")
    elseif(CMAKE_ARGV${i} STREQUAL "--")
        set(after_dashes TRUE)
    endif()
endforeach()
if(NOT command OR NOT DEFINED EXPECT_OUTPUT)
    message(FATAL_ERROR "usage: cmake -DEXPECT_OUTPUT=<regex> [-DEXPECT_EXIT=<code>] "
                        "-P expect.cmake -- <command> [<arg>...]")
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
                ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)
set(failed)
if(NOT rc STREQUAL EXPECT_EXIT)
    list(APPEND failed "exit ${rc}, expected ${EXPECT_EXIT}")
endif()
if(NOT out MATCHES "${EXPECT_OUTPUT}")
    list(APPEND failed "no output matching '${EXPECT_OUTPUT}'")
endif()
if(failed)
    string(REPLACE ";" "; " failed "${failed}")
    message(FATAL_ERROR "${failed}")
endif()
